"""Import a Slack export or a Beacon JSON-lines file into the canonical store, as one run.

Inputs are checked up front where that is cheap (unsafe ZIP names, missing users.json,
empty exports), then streamed day file by day file into staging tables and merged with
set-based SQL, all inside one transaction: any failure rolls back (and a store file that
the failed import created is removed), so the store is exactly as before.
"""

import hashlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson

from slackquery.canonical import store
from slackquery.canonical.rows import (
    MESSAGE_COLUMNS,
    SORTED,
    canonical_json,
    datetime_to_us,
    message_files,
    message_row,
    payload_hash,
    ts_to_us,
    us_to_ts,
)
from slackquery.canonical.sources import (
    CONVERSATION_LISTS,
    DAY_FILE,
    SOURCE_FORMATS,
    USER_LISTS,
    ExportReader,
    detect_format,
    iter_jsonl,
)
from slackquery.crash import crash_point
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

MAX_LISTED_WARNINGS = 1000
STAGE_BATCH_ROWS = 50_000
CONVERSATION_TYPES = {
    "channels.json": "public_channel",
    "groups.json": "private_channel",
    "dms.json": "im",
    "mpims.json": "mpim",
}
_SLUG_SUFFIX = re.compile(r"\s+slack\s+export.*$", re.IGNORECASE)
_SLACKBOT = {"id": "USLACKBOT", "name": "slackbot", "real_name": "Slackbot", "is_bot": True}


@dataclass
class Warnings:
    """Skipped or doubtful input, counted in the report (the list is capped, the count not)."""

    items: list[dict[str, str]] = field(default_factory=list)
    count: int = 0

    def add(self, where: str, problem: str) -> None:
        """Record one warning."""
        self.count += 1
        if len(self.items) < MAX_LISTED_WARNINGS:
            self.items.append({"file": where, "problem": problem})


@dataclass
class Staged:
    """What a reader produced for the merge: identity, coverage and row counts."""

    workspace_id: str
    team_name_hint: str | None
    source_format: str
    covered_channels: list[str]
    first_day: date | None
    last_day: date | None
    messages_staged: int = 0
    messages_skipped: int = 0


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
    if workspace_slug is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", workspace_slug):
        raise SlackqueryError(
            f"workspace slug {workspace_slug!r}: use lowercase letters, digits and dashes"
        )
    started_clock = time.perf_counter()
    started_at = datetime.now(UTC)
    run_id = f"{started_at:%Y%m%dT%H%M%S%f}Z-{uuid.uuid4().hex[:8]}"
    slug_hint = workspace_slug or slug_from_path(path)
    warnings = Warnings()

    if fmt == "beacon-jsonl":
        loader: Callable[[duckdb.DuckDBPyConnection], Staged] = _BeaconLoader(
            settings, path, slug_hint, warnings
        ).stage
    else:
        loader = _ExportLoader(settings, path, slug_hint, warnings).stage

    db_path = settings.canonical_path
    created = not db_path.exists()
    connection = store.open_store(db_path, settings.import_memory_limit)
    try:
        connection.begin()
        store.install_schema(connection, started_at)
        store.create_stage_tables(connection)
        staged = loader(connection)
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
        connection.commit()
    except BaseException:
        connection.rollback()
        connection.close()
        if created:
            _remove_store_files(db_path)
        raise
    connection.close()
    elapsed = time.perf_counter() - started_clock
    report["duration_s"] = round(elapsed, 3)
    report["messages_per_s"] = round(staged.messages_staged / elapsed, 1) if elapsed else None
    report["store"] = store.summarize(db_path)
    return report


def slug_from_path(path: Path) -> str:
    """`Acme Corp Slack export Jan 1 2024 - Feb 1 2024.zip` -> `acme-corp`."""
    stem = path.name if path.is_dir() else path.stem
    stem = _SLUG_SUFFIX.sub("", stem)
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    return slug or "workspace"


def _remove_store_files(db_path: Path) -> None:
    for candidate in (db_path, db_path.with_name(db_path.name + ".wal")):
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
    counts: dict[str, dict[str, int]] = {}
    for table, columns in (
        ("users", store.USER_COLUMNS),
        ("channels", store.CHANNEL_COLUMNS),
        ("messages", MESSAGE_COLUMNS),
        ("files", store.FILE_COLUMNS),
    ):
        counts[table] = store.merge_table(connection, table, columns, run_id=run_id, now=started_at)
    if staged.first_day is not None and staged.last_day is not None:
        counts["messages"]["tombstoned"] = store.tombstone_messages(
            connection,
            workspace_id=staged.workspace_id,
            first_day=staged.first_day,
            last_day=staged.last_day,
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
    workspace = _upsert_workspace(
        connection,
        staged,
        run_id=run_id,
        now=started_at,
        slug=workspace_slug,
        slug_hint=slug_hint,
        name=workspace_name,
        data_changed=changed,
    )
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
        "changed": changed,
        "warning_count": warnings.count,
        "warnings": warnings.items,
    }


def _upsert_workspace(
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
    """Create or refresh the workspace row; keep a stored slug/name unless one is given."""
    row = connection.execute(
        "select workspace_slug, team_name from workspaces where workspace_id = ?",
        [staged.workspace_id],
    ).fetchone()
    stored_slug, stored_name = row if row else (None, None)
    final_slug = slug or stored_slug or slug_hint
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
    }


class _RowBuffer:
    """Accumulates stage rows and flushes them to DuckDB in batches (bounded memory)."""

    def __init__(
        self, connection: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...]
    ) -> None:
        self.connection = connection
        self.table = table
        self.columns = columns
        self.rows: list[tuple[Any, ...]] = []
        self.total = 0

    def append(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= STAGE_BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        store.stage_frame(self.connection, self.table, self.columns, self.rows)
        self.total += len(self.rows)
        self.rows = []


def _stable_id(prefix: str, name: str) -> str:
    """A Slack-looking id (`C3F2A9…`) that is the same for the same name in every run."""
    return prefix + hashlib.sha256(name.encode("utf-8")).hexdigest()[:10].upper()


def _file_row(
    file: dict[str, Any],
    *,
    workspace_id: str,
    message_key: str,
    channel_id: str,
    ts: str,
    ts_us: int,
    local_paths: dict[str, str],
) -> tuple[Any, ...] | None:
    file_id = file.get("id")
    if not isinstance(file_id, str):
        return None
    size = file.get("size")
    return (
        workspace_id,
        file_id,
        message_key,
        channel_id,
        ts,
        file.get("name") if isinstance(file.get("name"), str) else None,
        file.get("title") if isinstance(file.get("title"), str) else None,
        file.get("mimetype") if isinstance(file.get("mimetype"), str) else None,
        size if isinstance(size, int) else None,
        local_paths.get(file_id),
        file.get("url_private") if isinstance(file.get("url_private"), str) else None,
        file.get("mode") == "tombstone",
        payload_hash(canonical_json(file)),
        ts_us,
    )


class _ExportLoader:
    """Stages a Slack export (standard or slackdump layout)."""

    def __init__(self, settings: Settings, path: Path, slug_hint: str, warnings: Warnings) -> None:
        self.settings = settings
        self.warnings = warnings
        self.reader = ExportReader(path)
        try:
            self._plan(slug_hint)
        except BaseException:
            self.reader.close()
            raise

    def _plan(self, slug_hint: str) -> None:
        """Read the lists and index the members; all checks that need no database."""
        reader = self.reader
        members = set(reader.members)
        user_list = next((name for name in USER_LISTS if name in members), None)
        if user_list is None:
            raise SlackqueryError(
                f"{reader.path.name}: missing users.json (or org_users.json) in the export"
            )
        if not any(name in members for name in CONVERSATION_LISTS):
            raise SlackqueryError(
                f"{reader.path.name}: no conversation list in the export (expected "
                "channels.json, groups.json, dms.json or mpims.json)"
            )
        self.users = self._load_users(user_list)
        teams = Counter(
            team
            for user in self.users.values()
            for team in (user.get("team_id"), (user.get("profile") or {}).get("team"))
            if isinstance(team, str) and team
        )
        self.workspace_id = teams.most_common(1)[0][0] if teams else slug_hint
        self.conversations: dict[str, dict[str, Any]] = {}  # channel_id -> entry
        self.folders: dict[str, str] = {}  # folder name -> channel_id
        for list_name in CONVERSATION_LISTS:
            if list_name in members:
                self._load_conversations(list_name, CONVERSATION_TYPES[list_name])

        self.day_files: list[tuple[str, str, str]] = []  # (channel_id, member, day)
        self.local_paths: dict[str, str] = {}
        unknown_folders: Counter[str] = Counter()
        for member in reader.members:
            parts = member.split("/")
            if len(parts) == 3 and parts[0] == "__uploads":
                self.local_paths.setdefault(parts[1], member)
                continue
            if len(parts) == 3 and parts[1] == "attachments" and "-" in parts[2]:
                self.local_paths.setdefault(parts[2].split("-", 1)[0], member)
                continue
            if len(parts) != 2:
                continue
            match = DAY_FILE.match(parts[1])
            if match is None:
                continue
            try:
                date.fromisoformat(match.group(1))
            except ValueError:
                self.warnings.add(reader.describe(member), "not a valid date: day file skipped")
                continue
            channel_id = self.folders.get(parts[0])
            if channel_id is None:
                unknown_folders[parts[0]] += 1
                continue
            self.day_files.append((channel_id, member, match.group(1)))
        for folder, count in sorted(unknown_folders.items()):
            self.warnings.add(
                reader.describe(folder + "/"),
                f"unknown conversation {folder!r} (not in any conversation list): "
                f"{count} day file(s) skipped",
            )
        if not self.day_files:
            raise SlackqueryError(
                f"{reader.path.name}: the export has no messages "
                "(no <conversation>/YYYY-MM-DD.json day files of a listed conversation)"
            )
        self.source_format = "slackdump_export" if self.local_paths else "slack_export"
        stem = reader.path.name if reader.path.is_dir() else reader.path.stem
        match = re.match(r"^(.*?)\s+slack\s+export", stem, re.IGNORECASE)
        self.team_name_hint = match.group(1).strip() if match else None

    def _load_list(self, member: str) -> list[Any]:
        value = self.reader.load_json(member)
        if not isinstance(value, list):
            raise SlackqueryError(
                f"{self.reader.describe(member)}: expected a JSON list, got {type(value).__name__}"
            )
        return value

    def _load_users(self, member: str) -> dict[str, dict[str, Any]]:
        users: dict[str, dict[str, Any]] = {}
        for entry in self._load_list(member):
            user_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(user_id, str):
                self.warnings.add(self.reader.describe(member), "user entry without an id skipped")
            elif user_id in users:
                self.warnings.add(self.reader.describe(member), f"duplicate user {user_id} skipped")
            else:
                users[user_id] = entry
        return users

    def _load_conversations(self, member: str, conversation_type: str) -> None:
        for entry in self._load_list(member):
            channel_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(channel_id, str):
                self.warnings.add(
                    self.reader.describe(member), "conversation entry without an id skipped"
                )
                continue
            if channel_id in self.conversations:
                self.warnings.add(
                    self.reader.describe(member), f"duplicate conversation {channel_id} skipped"
                )
                continue
            name = entry.get("name")
            folder = channel_id if conversation_type == "im" or not name else str(name)
            self.conversations[channel_id] = {
                "entry": entry,
                "type": conversation_type,
                "folder": folder,
                "list": member,
            }
            self.folders.setdefault(folder, channel_id)
        for channel_id in self.conversations:
            self.folders.setdefault(channel_id, channel_id)

    def _handle(self, user_id: str) -> str:
        user = self.users.get(user_id)
        name = user.get("name") if user else None
        return name if isinstance(name, str) and name else user_id

    def _channel_row(self, channel_id: str, info: dict[str, Any]) -> tuple[Any, ...]:
        entry = info["entry"]
        members = [member for member in entry.get("members") or [] if isinstance(member, str)]
        if info["type"] in ("im", "mpim"):
            if not members and isinstance(entry.get("user"), str):
                members = [entry["user"]]
            handles = sorted({self._handle(member) for member in members})
            name = ", ".join(handles) or str(entry.get("name") or channel_id)
        else:
            name = str(entry.get("name") or channel_id)
        created = entry.get("created")
        topic = entry.get("topic")
        purpose = entry.get("purpose")
        canonical = canonical_json(entry)
        return (
            self.workspace_id,
            channel_id,
            name,
            info["type"],
            bool(entry.get("is_archived")),
            bool(entry.get("is_general")),
            datetime.fromtimestamp(created, UTC) if isinstance(created, int | float) else None,
            entry.get("creator") if isinstance(entry.get("creator"), str) else None,
            topic.get("value") or None if isinstance(topic, dict) else None,
            purpose.get("value") or None if isinstance(purpose, dict) else None,
            orjson.dumps(members).decode(),
            info["folder"],
            canonical.decode(),
            payload_hash(canonical),
        )

    def stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        """Stream every day file into the stage tables; return coverage and counts."""
        try:
            return self._stage(connection)
        finally:
            self.reader.close()

    def _stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        reader = self.reader
        workspace_id = self.workspace_id
        max_bytes = self.settings.max_message_bytes
        known_users = set(self.users)
        bot_user_ids = {uid for uid, user in self.users.items() if user.get("is_bot")}
        extra_users: dict[str, dict[str, Any]] = {}
        unknown_users: dict[str, list[Any]] = {}  # id -> [first file, message count]
        messages = _RowBuffer(connection, "messages", MESSAGE_COLUMNS)
        files: list[tuple[Any, ...]] = []
        skipped_keys: list[str] = []
        seen: set[str] = set()
        skipped = 0
        days: list[str] = []
        self.day_files.sort(key=lambda item: (item[1].split("/")[0], item[2]))
        for channel_id, member, day in self.day_files:
            where = reader.describe(member)
            day_messages = reader.load_json(member)
            if not isinstance(day_messages, list):
                raise SlackqueryError(
                    f"{where}: a day file must be a JSON list of messages, "
                    f"got {type(day_messages).__name__}"
                )
            days.append(day)
            prefix = f"{workspace_id}:{channel_id}:"
            for message in day_messages:
                if not isinstance(message, dict):
                    self.warnings.add(where, "entry that is not a JSON object skipped")
                    skipped += 1
                    continue
                ts = message.get("ts")
                try:
                    ts_us = ts_to_us(ts) if isinstance(ts, str) else None
                except ValueError:
                    ts_us = None
                if ts_us is None:
                    self.warnings.add(where, f"message without a valid ts ({ts!r}) skipped")
                    skipped += 1
                    continue
                key = prefix + ts
                canonical = orjson.dumps(message, option=SORTED)
                if len(canonical) > max_bytes:
                    self.warnings.add(
                        where,
                        f"message ts={ts} is {len(canonical):,} bytes (limit "
                        f"{max_bytes:,}, settings.max_message_bytes): skipped",
                    )
                    skipped += 1
                    skipped_keys.append(key)
                    continue
                if key in seen:
                    self.warnings.add(where, f"duplicate message ts={ts} skipped")
                    skipped += 1
                    continue
                seen.add(key)
                user = message.get("user")
                if isinstance(user, str) and user not in known_users:
                    self._note_unknown_user(
                        user, message, where, extra_users, unknown_users, known_users
                    )
                bot_id = message.get("bot_id")
                if (
                    isinstance(bot_id, str)
                    and not isinstance(user, str)
                    and bot_id not in known_users
                    and bot_id not in extra_users
                ):
                    extra_users[bot_id] = _bot_user(bot_id, message)
                if "files" in message or "file" in message:
                    for file in message_files(message):
                        row = _file_row(
                            file,
                            workspace_id=workspace_id,
                            message_key=key,
                            channel_id=channel_id,
                            ts=ts,
                            ts_us=ts_us,
                            local_paths=self.local_paths,
                        )
                        if row is not None:
                            files.append(row)
                messages.append(
                    message_row(
                        message,
                        workspace_id=workspace_id,
                        channel_id=channel_id,
                        ts=ts,
                        ts_us=ts_us,
                        day=day,
                        canonical=canonical,
                        bot_user_ids=bot_user_ids,
                    )
                )
        messages.flush()
        for user_id, (first_file, count) in sorted(unknown_users.items()):
            source = "named from the message's user_profile" if user_id in extra_users else ""
            self.warnings.add(
                first_file,
                f"unknown user {user_id} (not in users.json), {count} message(s) kept"
                + (f"; {source}" if source else ""),
            )
        user_rows = [_user_row(workspace_id, entry) for entry in self.users.values()]
        user_rows += [_user_row(workspace_id, entry) for entry in extra_users.values()]
        store.stage_frame(connection, "users", store.USER_COLUMNS, user_rows)
        channel_rows = [
            self._channel_row(channel_id, info) for channel_id, info in self.conversations.items()
        ]
        store.stage_frame(connection, "channels", store.CHANNEL_COLUMNS, channel_rows)
        store.stage_frame(connection, "files", store.FILE_STAGE_COLUMNS, files)
        store.stage_values(connection, "skipped_keys", skipped_keys)
        store.stage_values(connection, "covered", list(self.conversations))
        return Staged(
            workspace_id=workspace_id,
            team_name_hint=self.team_name_hint,
            source_format=self.source_format,
            covered_channels=list(self.conversations),
            first_day=date.fromisoformat(min(days)) if days else None,
            last_day=date.fromisoformat(max(days)) if days else None,
            messages_staged=messages.total,
            messages_skipped=skipped,
        )

    @staticmethod
    def _note_unknown_user(
        user: str,
        message: dict[str, Any],
        where: str,
        extra_users: dict[str, dict[str, Any]],
        unknown_users: dict[str, list[Any]],
        known_users: set[str],
    ) -> None:
        """Slackbot is added silently; other unknown authors are kept and warned about once."""
        if user == "USLACKBOT":
            extra_users[user] = dict(_SLACKBOT)
            known_users.add(user)
            return
        if user in unknown_users:
            unknown_users[user][1] += 1
            return
        unknown_users[user] = [where, 1]
        profile = message.get("user_profile")
        if isinstance(profile, dict):
            extra_users[user] = {
                "id": user,
                "name": profile.get("name"),
                "real_name": profile.get("real_name"),
                "profile": profile,
            }


def _bot_user(bot_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """A users row for a bot that posts without a user id, named from its bot profile."""
    profile = message.get("bot_profile")
    name = profile.get("name") if isinstance(profile, dict) else None
    name = name or message.get("username") or bot_id
    return {"id": bot_id, "name": name, "real_name": name, "is_bot": True, "bot_profile": profile}


def _user_row(workspace_id: str, entry: dict[str, Any]) -> tuple[Any, ...]:
    profile = entry.get("profile") if isinstance(entry.get("profile"), dict) else {}

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) and value else None

    canonical = canonical_json(entry)
    return (
        workspace_id,
        entry["id"],
        text(entry.get("name")),
        text(entry.get("real_name")) or text(profile.get("real_name")),
        text(profile.get("display_name")),
        text(profile.get("title")),
        text(entry.get("tz")),
        bool(entry.get("is_bot")),
        bool(entry.get("deleted")),
        bool(entry.get("is_admin")),
        canonical.decode(),
        payload_hash(canonical),
    )


class _BeaconLoader:
    """Stages a Beacon JSON-lines chat file as one workspace with synthetic Slack ids."""

    def __init__(self, settings: Settings, path: Path, slug_hint: str, warnings: Warnings) -> None:
        self.settings = settings
        self.path = path
        self.warnings = warnings
        self.workspace_id = slug_hint
        self.records = self._read()

    def _read(self) -> list[tuple[int, dict[str, Any], int]]:
        """(line, record, created_at in µs) for every line, validated."""
        records = []
        for number, record in iter_jsonl(self.path):
            where = f"{self.path.name}:{number}"
            for name in ("local_id", "channel", "author", "created_at"):
                if not isinstance(record.get(name), str | int) or record.get(name) == "":
                    raise SlackqueryError(f"{where}: missing or invalid field {name!r}")
            if not isinstance(record.get("text"), str | None):
                raise SlackqueryError(f"{where}: field 'text' must be a string")
            if not isinstance(record.get("parent_id"), str | int | None):
                raise SlackqueryError(f"{where}: field 'parent_id' must be a string or null")
            try:
                created = datetime.fromisoformat(str(record["created_at"]))
            except ValueError as error:
                raise SlackqueryError(
                    f"{where}: created_at {record['created_at']!r} is not ISO 8601"
                ) from error
            records.append((number, record, datetime_to_us(created)))
        if not records:
            raise SlackqueryError(f"{self.path.name}: empty input (no JSON lines)")
        return records

    def stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        """Assign ids, unique ts and threads, then stage users, channels and messages."""
        workspace_id = self.workspace_id
        max_bytes = self.settings.max_message_bytes
        by_channel: dict[str, list[tuple[int, dict[str, Any], int]]] = {}
        for item in self.records:
            by_channel.setdefault(str(item[1]["channel"]), []).append(item)
        messages = _RowBuffer(connection, "messages", MESSAGE_COLUMNS)
        channel_rows = []
        authors: dict[str, str] = {}
        skipped = 0
        skipped_keys: list[str] = []
        days: list[str] = []
        for channel in sorted(by_channel):
            channel_id = _stable_id("C", channel)
            items = sorted(by_channel[channel], key=lambda item: (item[2], item[0]))
            assigned: dict[str, tuple[str, int]] = {}  # local_id -> (ts, line)
            ordered = []
            last_us = None
            for number, record, created_us in items:
                local_id = str(record["local_id"])
                if local_id in assigned:
                    self.warnings.add(
                        f"{self.path.name}:{number}",
                        f"duplicate local_id {local_id!r} in channel {channel!r} skipped",
                    )
                    skipped += 1
                    continue
                ts_us = created_us if last_us is None or created_us > last_us else last_us + 1
                last_us = ts_us
                assigned[local_id] = (us_to_ts(ts_us), number)
                ordered.append((number, record, ts_us))
            parents: dict[str, str | None] = {
                str(record["local_id"]): self._parent(record, assigned, channel, number)
                for number, record, _ts_us in ordered
            }
            roots = {local_id: _thread_root(local_id, parents) for local_id in parents}
            reply_counts: Counter[str] = Counter()
            for local_id, root in roots.items():
                if root is not None and root != local_id:
                    reply_counts[root] += 1
            member_ids = sorted(
                {_stable_id("U", str(record["author"])) for _, record, _ in ordered}
            )
            for number, record, ts_us in ordered:
                local_id = str(record["local_id"])
                author = str(record["author"])
                user_id = _stable_id("U", author)
                authors[user_id] = author
                ts = assigned[local_id][0]
                key = f"{workspace_id}:{channel_id}:{ts}"
                canonical = canonical_json(record)
                if len(canonical) > max_bytes:
                    self.warnings.add(
                        f"{self.path.name}:{number}",
                        f"message {local_id!r} is {len(canonical):,} bytes (limit "
                        f"{max_bytes:,}, settings.max_message_bytes): skipped",
                    )
                    skipped += 1
                    skipped_keys.append(key)
                    continue
                root = roots[local_id]
                replies = reply_counts.get(local_id, 0)
                thread_ts = None
                if root is not None and root != local_id:
                    thread_ts = assigned[root][0]
                elif replies:
                    thread_ts = ts
                day = datetime.fromtimestamp(ts_us // 1_000_000, UTC).date().isoformat()
                days.append(day)
                message = {
                    "ts": ts,
                    "user": user_id,
                    "text": record.get("text") or "",
                    "thread_ts": thread_ts,
                    "reply_count": replies or None,
                }
                messages.append(
                    message_row(
                        message,
                        workspace_id=workspace_id,
                        channel_id=channel_id,
                        ts=ts,
                        ts_us=ts_us,
                        day=day,
                        canonical=canonical,
                        source_message_id=f"synthetic:{channel}:{local_id}",
                    )
                )
            created_us = ordered[0][2] if ordered else None
            raw = {
                "id": channel_id,
                "name": channel,
                "members": member_ids,
                "created_ts": us_to_ts(created_us) if created_us is not None else None,
            }
            canonical = canonical_json(raw)
            channel_rows.append(
                (
                    workspace_id,
                    channel_id,
                    channel,
                    "public_channel",
                    False,
                    False,
                    datetime.fromtimestamp(created_us / 1_000_000, UTC) if created_us else None,
                    _stable_id("U", str(ordered[0][1]["author"])) if ordered else None,
                    None,
                    None,
                    orjson.dumps(member_ids).decode(),
                    channel,
                    canonical.decode(),
                    payload_hash(canonical),
                )
            )
        messages.flush()
        user_rows = []
        for user_id, author in sorted(authors.items()):
            raw = {"id": user_id, "name": author}
            canonical = canonical_json(raw)
            user_rows.append(
                (
                    workspace_id,
                    user_id,
                    author,
                    None,
                    author,
                    None,
                    None,
                    False,
                    False,
                    False,
                    canonical.decode(),
                    payload_hash(canonical),
                )
            )
        store.stage_frame(connection, "users", store.USER_COLUMNS, user_rows)
        store.stage_frame(connection, "channels", store.CHANNEL_COLUMNS, channel_rows)
        store.stage_values(connection, "skipped_keys", skipped_keys)
        covered = [row[1] for row in channel_rows]
        store.stage_values(connection, "covered", covered)
        return Staged(
            workspace_id=workspace_id,
            team_name_hint=None,
            source_format="beacon_jsonl",
            covered_channels=covered,
            first_day=date.fromisoformat(min(days)) if days else None,
            last_day=date.fromisoformat(max(days)) if days else None,
            messages_staged=messages.total,
            messages_skipped=skipped,
        )

    def _parent(
        self,
        record: dict[str, Any],
        assigned: dict[str, tuple[str, int]],
        channel: str,
        number: int,
    ) -> str | None:
        """The record's parent local id, or None (with a warning when it does not exist)."""
        parent = record.get("parent_id")
        if parent is None:
            return None
        parent = str(parent)
        if parent not in assigned or parent == str(record["local_id"]):
            self.warnings.add(
                f"{self.path.name}:{number}",
                f"parent_id {parent!r} not found in channel {channel!r}: kept as a top-level "
                "message",
            )
            return None
        return parent


def _thread_root(local_id: str, parents: dict[str, str | None]) -> str | None:
    """The root a message's thread hangs from (None for top-level messages).

    Follows parent links, so a reply to a reply joins the root's thread (Slack threads
    are one level deep); a cycle resolves to the message where it was detected.
    """
    parent = parents.get(local_id)
    if parent is None:
        return None
    seen = {local_id}
    while parents.get(parent) is not None and parent not in seen:
        seen.add(parent)
        parent = parents[parent]
    return parent
