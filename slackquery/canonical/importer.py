"""Import a Slack export or a Beacon JSON-lines file into the canonical store, as one run.

Inputs are checked up front where that is cheap (unsafe ZIP names, missing users.json,
empty exports), then streamed day file by day file into staging tables and merged with
set-based SQL, all inside one transaction: any failure rolls back (and a store file that
the failed import created is removed), so the store is exactly as before.
"""

import contextlib
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import duckdb
import orjson

from slackquery import interrupts
from slackquery.artifacts.files import holder_name
from slackquery.canonical import store, torn_commits
from slackquery.canonical.formats import LOADERS
from slackquery.canonical.rows import MESSAGE_COLUMNS
from slackquery.canonical.sources import SOURCE_FORMATS, detect_format
from slackquery.canonical.staging import CopyEvidence, Staged, Warnings
from slackquery.crash import crash_point
from slackquery.duckdb_setup import wal_file
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

# A workspace slug, as Slack's own domains are, a DNS label: it names the workspace's
# address, so permalinks (`https://<slug>.slack.com/...`) are built from it.
SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# What a workspace keyed by its slug (an input without a team id) may be keyed by: the slug
# of a file name (`slug_from_path`) is not held to the label's limits, since it is the id.
SLUG_KEY = re.compile(r"[a-z0-9][a-z0-9-]*")

_SLUG_SUFFIX = re.compile(r"\s+slack\s+export.*$", re.IGNORECASE)


def import_source(
    settings: Settings,
    path: str | Path,
    *,
    source_format: str | None = None,
    workspace_slug: str | None = None,
    workspace_name: str | None = None,
) -> dict[str, Any]:
    """Import one input as one run and return its report.

    The report: run_id, workspace (id, slug, name, url), source_format, counts per table
    (inserted / updated / unchanged / tombstoned), skipped message count, warnings
    (capped list) and warning_count, message throughput. Raises SlackqueryError for bad
    input; the store is then unchanged.
    """
    path = Path(path)
    fmt = source_format or detect_format(path)
    if fmt not in SOURCE_FORMATS:
        raise SlackqueryError(
            f"unknown format {fmt!r}; expected one of {', '.join(SOURCE_FORMATS)}"
        )
    if workspace_slug is not None and not SLUG.fullmatch(workspace_slug):
        raise SlackqueryError(
            f"workspace slug {workspace_slug!r}: use lowercase letters, digits and dashes, "
            "at most 63, neither first nor last a dash"
        )
    started_clock = time.perf_counter()
    started_at = datetime.now(UTC)
    run_id = f"{started_at:%Y%m%dT%H%M%S%f}Z-{uuid.uuid4().hex[:8]}"
    slug_hint = workspace_slug or slug_from_path(path)
    warnings = Warnings()

    with store.writer_lock(settings, holder_name("an import")):
        loader = LOADERS[fmt](settings, path, slug_hint, warnings)
        report = _import_in_one_transaction(
            settings,
            loader,
            path,
            started_at=started_at,
            run_id=run_id,
            workspace_slug=workspace_slug,
            slug_hint=slug_hint,
            workspace_name=workspace_name,
            warnings=warnings,
        )
    elapsed = time.perf_counter() - started_clock
    report["duration_s"] = round(elapsed, 3)
    report["messages_per_s"] = (
        round(report.pop("messages_staged") / elapsed, 1) if elapsed else None
    )
    report["store"] = store.summarize(settings.canonical_path)
    return report


def _import_in_one_transaction(
    settings: Settings,
    loader: Any,
    path: Path,
    *,
    started_at: datetime,
    run_id: str,
    workspace_slug: str | None,
    slug_hint: str,
    workspace_name: str | None,
    warnings: Warnings,
) -> dict[str, Any]:
    """Stage and merge inside one transaction; on failure leave the store as it was."""
    db_path = settings.canonical_path
    created = not db_path.exists()
    _undo_torn_runs(db_path, path, warnings)
    connection = store.open_store(db_path, settings.import_memory_limit)
    try:
        connection.begin()
        store.install_schema(connection, started_at)
        store.create_stage_tables(connection)
        if workspace_slug is not None and not loader.has_team_id:
            loader.workspace_id = _workspace_of_slug(connection, workspace_slug)
        staged = loader.stage(connection)
        if workspace_slug is None:
            _refuse_second_copy(connection, staged, path)
        report = _merge(
            connection,
            staged,
            run_id=run_id,
            started_at=started_at,
            source_path=path,
            workspace_slug=workspace_slug,
            slug_hint=slug_hint,
            workspace_name=workspace_name,
            warnings=warnings,
        )
        store.drop_stage_tables(connection)
        crash_point("import_before_commit")
    except BaseException as error:
        _give_up(connection, db_path, created, error)
    # A stop (Ctrl-C, SIGTERM) waits for the commit, so the command's last word is the
    # store's: DuckDB would end the commit in an error, whole or not.
    with interrupts.held(f"import run {run_id} had committed whole"):
        try:
            torn_commits.mark(db_path, run_id, path)
            _commit(connection)
        except BaseException as error:
            _give_up(connection, db_path, created, error)
        torn_commits.clear_mark(db_path)  # the commit returned: its log entry is whole
        connection.close()
    return {**report, "messages_staged": staged.messages_staged}


def _undo_torn_runs(db_path: Path, path: Path, warnings: Warnings) -> None:
    """Remove what earlier imports cut off during their commit left, and say so."""
    for run in torn_commits.undo(db_path):
        again = "" if run.source_path == str(path.resolve()) else "; import that input again"
        warnings.add(
            run.source_path,
            f"import run {run.run_id} was cut off during its commit; "
            f"its {run.rows} partial rows were removed{again}",
        )


def _commit(connection: duckdb.DuckDBPyConnection) -> None:
    """Commit; a commit that could not write its log (disk full, file too large, I/O
    error) is a failed write, reported as one. Any other commit failure stays as it is.
    """
    try:
        connection.commit()
    except duckdb.TransactionException as error:
        if "Could not write" in str(error) or "No space left" in str(error):
            raise duckdb.IOException(str(error)) from error
        raise


def _give_up(
    connection: duckdb.DuckDBPyConnection, db_path: Path, created: bool, error: BaseException
) -> NoReturn:
    """Leave the store as it was before the import, and raise `error` (a failed write as
    one line saying nothing was imported)."""
    _abandon(connection)
    # A kept store keeps the marker: a commit that failed while writing its log (a full
    # disk) may have left it torn, and the next open replays it. A whole one is cleared.
    if created:
        _remove_store_files(db_path)
    if isinstance(error, duckdb.IOException):
        detail = " ".join(str(error).split())
        raise SlackqueryError(
            f"{db_path}: could not write the canonical store, nothing was imported ({detail})"
        ) from error
    raise error


def _abandon(connection: duckdb.DuckDBPyConnection) -> None:
    """Roll back and close after a failure without hiding it under a second error.

    A failed commit has already ended the transaction; rolling back then raises "no
    transaction is active", which would replace the error that says what went wrong.
    """
    try:
        with contextlib.suppress(duckdb.Error):  # ended, or the database invalidated
            connection.rollback()
    finally:
        connection.close()


def slug_from_path(path: Path) -> str:
    """`Acme Corp Slack export Jan 1 2024 - Feb 1 2024.zip` -> `acme-corp`."""
    stem = path.name if path.is_dir() else path.stem
    stem = _SLUG_SUFFIX.sub("", stem)
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    return slug or "workspace"


# What, found in another stored workspace, shows that an input without a team id copies
# it. Slack channel ids are unique, so one shared channel does; Beacon's are hashes of
# channel names that any two corpora may share (`general`), so only the same messages
# (channel, ts and payload) do.
_SHARED_ROWS: dict[CopyEvidence, str] = {
    "channels": "select channels.workspace_id, channels.channel_id as example "
    "from channels inner join stage_channels using (channel_id)",
    "messages": "select messages.workspace_id, messages.source_message_id as example "
    "from messages inner join stage_messages as stage on messages.channel_id = stage.channel_id "
    "and messages.ts = stage.ts and messages.payload_hash = stage.payload_hash",
}


def _workspace_of_slug(connection: duckdb.DuckDBPyConnection, slug: str) -> str:
    """The workspace an input without a team id goes into when `--workspace-slug` names it:
    the stored workspace with that slug (one whose id is the slug first, should two have
    it), else the one whose id is the slug, else a new one with the slug as its id.

    A workspace imported with team ids has its team id as id, so this is how an export that
    lost them (users.json empty or stripped) still updates it instead of copying it.
    """
    row = connection.execute(
        "select workspace_id from workspaces where workspace_slug = $slug "
        "order by workspace_id <> $slug, workspace_id limit 1",
        {"slug": slug},
    ).fetchone()
    return str(row[0]) if row else slug


def _refuse_second_copy(connection: duckdb.DuckDBPyConnection, staged: Staged, path: Path) -> None:
    """Refuse an input that names no team and would duplicate a stored workspace.

    Without a team id the workspace id is the slug taken from the file name, which
    matches successive exports as Slack names them ("Acme Slack export <dates>.zip") but
    not renamed files (`v1.zip`, `v2.zip`): those would become a second workspace holding
    a copy of every message. Rows it shares with a stored workspace give it away. The
    advice names the stored workspace's slug, which `--workspace-slug` resolves to it.
    """
    if staged.copy_evidence is None:
        return
    row = connection.execute(
        "select count(*) from workspaces where workspace_id = ?", [staged.workspace_id]
    ).fetchone()
    if row and row[0]:
        return
    matches = connection.execute(
        "select workspace_id, any_value(workspace_slug), count(*) as shared, min(example) "
        f"from ({_SHARED_ROWS[staged.copy_evidence]}) inner join workspaces using (workspace_id) "
        "group by 1 order by shared desc, 1 limit 1"
    ).fetchone()
    if matches is None:
        return
    existing, existing_slug, shared, example = matches
    separate = (
        f"--workspace-slug {staged.workspace_id}"
        if staged.workspace_id != existing_slug
        else "--workspace-slug with a slug no stored workspace has"
    )
    raise SlackqueryError(
        f"{path.name}: the input names no team id, and the workspace slug "
        f"{staged.workspace_id!r} derived from its file name is new, but {shared} of its "
        f"{staged.copy_evidence} (e.g. {example}) belong to workspace {existing!r} (slug "
        f"{existing_slug!r}) already in the store; pass --workspace-slug {existing_slug} to "
        f"update that workspace, or {separate} to import it as a separate one"
    )


@dataclass(frozen=True)
class SlugKeyedCopy:
    """A stored workspace keyed by a slug that holds `shared` users of another (e.g.
    `example`)."""

    workspace_id: str
    workspace_slug: str
    shared: int
    example: str


def slug_keyed_copy(
    connection: duckdb.DuckDBPyConnection, workspace_id: str, user_ids: list[str]
) -> SlugKeyedCopy | None:
    """The stored workspace, other than `workspace_id` (a Slack team id), that holds the
    most of `user_ids` (its users as Slack lists them) and is keyed by a slug: one
    imported from an input without a team id, so the same workspace under another id.

    A stored workspace keyed by another team id that shares users is another workspace
    of the same Enterprise Grid org, not a copy; so only slug-keyed ones count (a team id
    is upper case, a slug never is).
    """
    if not user_ids:
        return None
    row = connection.execute(
        "select workspace_id, any_value(workspace_slug), count(*), min(user_id) "
        "from users inner join workspaces using (workspace_id) "
        "where workspace_id <> $team and regexp_full_match(workspace_id, $slug) "
        "and user_id in (select unnest($users)) "
        "group by 1 order by 3 desc, 1 limit 1",
        {"team": workspace_id, "slug": SLUG_KEY.pattern, "users": user_ids},
    ).fetchone()
    return SlugKeyedCopy(*row) if row else None


def _remove_store_files(db_path: Path) -> None:
    for candidate in (db_path, wal_file(db_path), torn_commits.marker(db_path)):
        candidate.unlink(missing_ok=True)


def _merge(
    connection: duckdb.DuckDBPyConnection,
    staged: Staged,
    *,
    run_id: str,
    started_at: datetime,
    source_path: Path,
    workspace_slug: str | None,
    slug_hint: str,
    workspace_name: str | None,
    warnings: Warnings,
) -> dict[str, Any]:
    """Merge every stage table, tombstone, upsert the workspace row and record the run."""
    store.mark_thread_parents(connection)
    store.dedupe_stage_files(connection)
    # An input that is no snapshot proves nothing of when it was made: the import's start
    # stands in, so the last one imported wins (and can restore a message).
    observed_at = store.input_observed_at(connection, started_at) if staged.snapshot else started_at
    for table in ("messages", "channels", "users"):
        stale = store.stale_rows(connection, table, observed_at)
        _warn_stale(warnings, source_path, table, observed_at, stale)
    counts: dict[str, dict[str, int]] = {}
    for table, columns in (
        ("users", store.USER_COLUMNS),
        ("channels", store.CHANNEL_COLUMNS),
        ("messages", MESSAGE_COLUMNS),
        ("files", store.FILE_COLUMNS),
    ):
        counts[table] = store.merge_table(
            connection, table, columns, run_id=run_id, now=started_at, observed_at=observed_at
        )
    if staged.first_day is not None and staged.last_day is not None:
        counts["messages"]["tombstoned"] = store.tombstone_messages(
            connection,
            workspace_id=staged.workspace_id,
            first_day=staged.first_day,
            last_day=staged.last_day,
            observed_at=observed_at,
            run_id=run_id,
            now=started_at,
        )
    counts["files"]["tombstoned"] = store.tombstone_files(
        connection, workspace_id=staged.workspace_id, run_id=run_id, now=started_at
    )
    changed = any(
        table_counts[kind]
        for table_counts in counts.values()
        for kind in ("inserted", "updated", "tombstoned")
    )
    workspace = upsert_workspace(
        connection,
        staged,
        run_id=run_id,
        now=started_at,
        slug=workspace_slug,
        slug_hint=slug_hint,
        name=workspace_name,
        data_changed=changed,
    )
    _warn_shared_slug(connection, warnings, source_path, workspace)
    run_counts = {**counts, "messages_skipped": staged.messages_skipped}
    connection.execute(
        "insert into import_runs values ($run_id, $workspace_id, $source_path, $source_format, "
        "$started_at, $completed_at, 'succeeded', $counts, $warnings)",
        {
            "run_id": run_id,
            "workspace_id": staged.workspace_id,
            "source_path": str(source_path.resolve()),
            "source_format": staged.source_format,
            "started_at": started_at,
            "completed_at": datetime.now(UTC),
            "counts": orjson.dumps(run_counts).decode(),
            "warnings": orjson.dumps(warnings.items).decode(),
        },
    )
    return {
        "run_id": run_id,
        "workspace": workspace,
        "source_path": str(source_path),
        "source_format": staged.source_format,
        "counts": counts,
        "messages_skipped": staged.messages_skipped,
        "changed": changed or workspace["renamed"],
        "warning_count": warnings.count,
        "warnings": warnings.items,
    }


def _warn_shared_slug(
    connection: duckdb.DuckDBPyConnection,
    warnings: Warnings,
    source_path: Path,
    workspace: dict[str, Any],
) -> None:
    """Warn when another workspace has the slug too: the permalinks of both would point
    to the same Slack, one of them wrongly."""
    others = [
        row[0]
        for row in connection.execute(
            "select workspace_id from workspaces where workspace_slug = ? and workspace_id <> ? "
            "order by 1",
            [workspace["workspace_slug"], workspace["workspace_id"]],
        ).fetchall()
    ]
    if others:
        warnings.add(
            str(source_path),
            f"workspace slug {workspace['workspace_slug']!r} is also that of "
            f"{', '.join(others)}: the permalinks of both point to {workspace['workspace_url']}; "
            "give one of them its own with --workspace-slug",
        )


# What a sync reads of a channel or a user that an older input would undo.
_SYNCED_FIELDS = {
    "channels": "a channel's privacy, members or name",
    "users": "a user's name or deactivation",
}


def _warn_stale(
    warnings: Warnings,
    path: Path,
    table: str,
    observed_at: datetime,
    stale: dict[str, tuple[int, str | None]],
) -> None:
    """Name the input's rows that are older than their stored copy (kept as stored)."""
    newest = f"this input's newest message or edit ({observed_at:%Y-%m-%d %H:%M:%S} UTC)"
    reasons = {
        "edited": "not updated: the store holds a later edit of them",
        "deleted": f"kept deleted: the deletion was recorded after {newest}, so the input may "
        "be older than the deletion; an input holding a later message would restore them",
        "synced": f"kept as a sync read them after {newest}: an older input does not undo "
        + _SYNCED_FIELDS.get(table, "")
        + " read from Slack since",
    }
    what = {"messages": "message(s)", "channels": "channel(s)", "users": "user(s)"}[table]
    for reason, (count, example) in stale.items():
        warnings.add(path.name, f"{count} {what} (e.g. {example}) {reasons[reason]}")


def upsert_workspace(
    connection: duckdb.DuckDBPyConnection,
    staged: Staged,
    *,
    run_id: str,
    now: datetime,
    slug: str | None,
    slug_hint: str,
    name: str | None,
    data_changed: bool,
) -> dict[str, str]:
    """Create or refresh the workspace row; keep a stored slug/name unless one is given.

    Says where the slug came from (`slug_source`) and whether slug or name changed
    (`renamed`): every permalink is built on the slug, and one guessed from the file name
    (`acme-corp` from `Acme Corp Slack export ….zip`) is wrong as often as not."""
    row = connection.execute(
        "select workspace_slug, team_name from workspaces where workspace_id = ?",
        [staged.workspace_id],
    ).fetchone()
    stored_slug, stored_name = row if row else (None, None)
    final_slug = slug or stored_slug or slug_hint
    slug_source = (
        "--workspace-slug" if slug else "an earlier import" if stored_slug else "the file name"
    )
    final_name = name or stored_name or staged.team_name_hint or final_slug
    url = f"https://{final_slug}.slack.com"
    values = {
        "workspace_id": staged.workspace_id,
        "slug": final_slug,
        "name": final_name,
        "url": url,
        "source_format": staged.source_format,
        "run_id": run_id,
        "now": now,
    }
    if row is None:
        connection.execute(
            "insert into workspaces values ($workspace_id, $slug, $name, $url, $source_format, "
            "$run_id, $now)",
            values,
        )
    elif data_changed or (stored_slug, stored_name) != (final_slug, final_name):
        connection.execute(
            "update workspaces set workspace_slug = $slug, team_name = $name, "
            "workspace_url = $url, source_format = $source_format, latest_run_id = $run_id, "
            "last_changed_at = $now where workspace_id = $workspace_id",
            values,
        )
    return {
        "workspace_id": staged.workspace_id,
        "workspace_slug": final_slug,
        "workspace_name": final_name,
        "workspace_url": url,
        "slug_source": slug_source,
        "renamed": row is not None and (stored_slug, stored_name) != (final_slug, final_name),
    }
