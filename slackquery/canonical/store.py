"""The canonical DuckDB: schema, staging tables and the set-based merge of one import run.

Rows are bulk-loaded into temporary `stage_*` tables, then merged with a handful of SQL
statements per table (count, update changed, insert new, tombstone vanished). Everything
runs inside the caller's single transaction, so a failed import leaves no trace.
"""

import contextlib
from collections.abc import Iterator
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from slackquery.artifacts.files import exclusive_lock
from slackquery.canonical import torn_commits
from slackquery.canonical.rows import (
    LAST_STORABLE_US,
    MESSAGE_COLUMNS,
    ChannelRow,
    FileRow,
    UserRow,
    datetime_to_us,
    us_to_datetime,
)
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.projection import CANONICAL_SCHEMA_VERSION
from slackquery.settings import Settings

CHANNEL_COLUMNS = ChannelRow._fields
USER_COLUMNS = UserRow._fields
# Staged file rows carry the message's ts_us so duplicates resolve to the first share.
FILE_STAGE_COLUMNS = FileRow._fields
FILE_COLUMNS = tuple(column for column in FILE_STAGE_COLUMNS if column != "message_ts_us")

# Per table: key columns, and the columns whose change counts as an update besides
# payload_hash (derived values that the raw payload does not capture).
MERGE_RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "channels": (("workspace_id", "channel_id"), ("name", "conversation_type", "member_ids")),
    "users": (("workspace_id", "user_id"), ()),
    "files": (("workspace_id", "file_id"), ("message_key", "local_object_path", "is_deleted")),
    "messages": (
        ("message_key",),
        ("is_deleted", "is_thread_parent", "thread_ts", "reply_count", "conversation_day"),
    ),
}


def _ts_us(column: str) -> str:
    """SQL for a Slack ts string column in microseconds (null when it is not a number)."""
    return f"try_cast(try_cast({column} as decimal(38, 6)) * 1000000 as bigint)"


def _edit_order(alias: str) -> str:
    """SQL ordering a message's versions: unedited, edited at an unknown time, by `edited.ts`."""
    return (
        f"case when {alias}.is_edited then coalesce({_ts_us(f'{alias}.edited_ts')}, 0) else -1 end"
    )


# Per table and reason: when a staged copy is provably older than the stored row, which then
# stays as it is (inputs may arrive in any order; the last one must not simply win).
# - deleted: the row was tombstoned after the input was observed (`$observed_at`, see
#   `merge_table`). Slack deletions are final, so only an input observed after the
#   tombstone was recorded shows that the message still exists.
# - edited: the stored copy carries a later edit. Slack edits only move forward, and an
#   export keeps only the final text, so an earlier `edited.ts` (or none) is a stale copy.
# - synced: a sync read the workspace after the input was observed, so its channels
#   (privacy, members, names) and users (deactivation) are newer than the input's: an
#   older export imported after a sync must not reopen what the sync closed. The next
#   sync reads them again either way.
# Other changes (reactions, reply counts) carry no time, so for them the last input wins.
_DELETED_SINCE_OBSERVED = (
    "target.is_deleted and not stage.is_deleted and target.last_changed_at > $observed_at"
)
_SYNCED_SINCE_OBSERVED = (
    "exists (select 1 from sync_channels as synced where synced.workspace_id = "
    "target.workspace_id and synced.updated_at > $observed_at{same_channel})"
)
STALE_RULES: dict[str, dict[str, str]] = {
    "messages": {
        "deleted": _DELETED_SINCE_OBSERVED,
        # A deletion carries no `edited` (Slack's tombstone copy), yet is never stale by it.
        "edited": f"not stage.is_deleted and {_edit_order('target')} > {_edit_order('stage')}",
    },
    "files": {"deleted": _DELETED_SINCE_OBSERVED},
    # A channel only if a sync read that channel (one `--types public` never reads a
    # private channel's members); users whenever a sync read the workspace (every run
    # reads users.list).
    "channels": {
        "synced": _SYNCED_SINCE_OBSERVED.format(
            same_channel=" and synced.channel_id = target.channel_id"
        )
    },
    "users": {"synced": _SYNCED_SINCE_OBSERVED.format(same_channel="")},
}

# Typed conversion from the pandas frame (JSON as text, dates as ISO strings) to stage rows.
_MESSAGE_SELECT = ", ".join(
    {
        "reactions": "cast(reactions as json) as reactions",
        "file_ids": "cast(from_json(file_ids, '[\"VARCHAR\"]') as varchar[]) as file_ids",
        "conversation_day": "cast(conversation_day as date) as conversation_day",
        "raw_json": "cast(raw_json as json) as raw_json",
        "ts_us": "cast(ts_us as bigint) as ts_us",
        "reply_count": "cast(reply_count as integer) as reply_count",
    }.get(column, f"{column}")
    for column in MESSAGE_COLUMNS
)


def open_store(path: Path, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the canonical database for writing.

    The memory limit makes DuckDB spill staging and uncommitted rows to its temp folder
    instead of growing with the input (a 1M-message import stages ~2 GB of text).
    A store holding part of a cut-off commit (`torn_commits`) is refused: only an import
    (`torn_commits.undo`) may build on it.
    """
    make_folder(path.parent)
    connection = open_database(str(path), what="canonical store")
    try:
        connection.execute("set preserve_insertion_order = false")
        connection.execute("set enable_progress_bar = false")  # no bar on stderr mid-import
        connection.execute(f"set memory_limit = '{memory_limit}'")
        torn_commits.refuse(connection, path)
        torn_commits.clear_mark(path)  # what it names committed whole, or not at all
    except BaseException:
        connection.close()
        raise
    return connection


def install_schema(connection: duckdb.DuckDBPyConnection, installed_at: datetime) -> None:
    """Create missing tables and record schema version 2 once (inside the open transaction)."""
    ddl = resources.files("slackquery.canonical").joinpath("schema.sql").read_text("utf-8")
    connection.execute(ddl)
    versions = connection.execute("select max(schema_version) from schema_metadata").fetchone()
    if versions is None or versions[0] is None:
        connection.execute(
            "insert into schema_metadata values (?, ?)", [CANONICAL_SCHEMA_VERSION, installed_at]
        )
    elif versions[0] != CANONICAL_SCHEMA_VERSION:
        raise SlackqueryError(
            f"canonical store has schema version {versions[0]}; this importer writes "
            f"version {CANONICAL_SCHEMA_VERSION}"
        )


def create_stage_tables(connection: duckdb.DuckDBPyConnection) -> None:
    """Temporary tables shaped like their targets (minus run bookkeeping columns)."""
    for table, columns in (
        ("channels", CHANNEL_COLUMNS),
        ("users", USER_COLUMNS),
        ("messages", MESSAGE_COLUMNS),
    ):
        connection.execute(
            f"create or replace temp table stage_{table} as "
            f"select {', '.join(columns)} from {table} limit 0"
        )
    connection.execute(
        "create or replace temp table stage_files as "
        f"select {', '.join(FILE_COLUMNS)}, 0::bigint as message_ts_us from files limit 0"
    )
    connection.execute(
        "create or replace temp table stage_skipped_keys (message_key varchar not null)"
    )
    connection.execute(
        "create or replace temp table stage_skipped_days "
        "(channel_id varchar not null, conversation_day date not null)"
    )
    connection.execute("create or replace temp table stage_covered (channel_id varchar not null)")


def stage_frame(
    connection: duckdb.DuckDBPyConnection,
    table: str,
    columns: tuple[str, ...],
    rows: list[tuple[Any, ...]],
) -> None:
    """Bulk-insert rows into `stage_<table>` through a pandas frame (one vectorised scan)."""
    if not rows:
        return
    frame = pd.DataFrame.from_records(rows, columns=list(columns))  # noqa: F841 (scanned)
    if table == "messages":
        select = _MESSAGE_SELECT
    elif table == "channels":
        select = ", ".join(
            "cast(from_json(member_ids, '[\"VARCHAR\"]') as varchar[]) as member_ids"
            if column == "member_ids"
            else "cast(raw_json as json) as raw_json"
            if column == "raw_json"
            else "cast(created_at as timestamptz) as created_at"
            if column == "created_at"
            else column
            for column in columns
        )
    elif table == "users":
        select = ", ".join(
            "cast(raw_json as json) as raw_json" if column == "raw_json" else column
            for column in columns
        )
    else:
        select = ", ".join(
            f"cast({column} as bigint) as {column}"
            if column in ("size", "message_ts_us")
            else column
            for column in columns
        )
    connection.execute(
        f"insert into stage_{table} ({', '.join(columns)}) select {select} from frame"
    )


def stage_values(connection: duckdb.DuckDBPyConnection, table: str, values: list[str]) -> None:
    """Fill a one-column stage table (`stage_skipped_keys`, `stage_covered`)."""
    if values:
        frame = pd.DataFrame({"value": values})  # noqa: F841 (scanned)
        connection.execute(f"insert into stage_{table} select distinct value from frame")


def stage_skipped_days(connection: duckdb.DuckDBPyConnection, days: list[tuple[str, str]]) -> None:
    """Fill `stage_skipped_days`: conversation-days that held a message skipped without a key."""
    if days:
        frame = pd.DataFrame.from_records(days, columns=["channel_id", "day"])  # noqa: F841
        connection.execute(
            "insert into stage_skipped_days select channel_id, cast(day as date) from frame"
        )


def merge_table(
    connection: duckdb.DuckDBPyConnection,
    table: str,
    columns: tuple[str, ...],
    *,
    run_id: str,
    now: datetime,
    observed_at: datetime,
) -> dict[str, int]:
    """Merge `stage_<table>` into `table`: update changed rows, insert new ones; count all.

    This is the one rule for how a stored row changes, for every writer (import and sync):
    a row changes when its payload hash or a derived column differs, unless the staged copy
    is provably older than the stored row (`STALE_RULES`; it then counts as unchanged).
    `now` stamps the rows this run changes. `observed_at` is the earliest moment the staged
    rows can have been read: a sync page's request time; for an import, the input's newest
    message or edit (`input_observed_at`).
    """
    keys, _ = MERGE_RULES[table]
    join = _join(keys)
    changed = _changed(table)
    stale = STALE_RULES.get(table, {})
    if stale:
        changed = f"({changed}) and not ({' or '.join(f'({rule})' for rule in stale.values())})"
    observed = {"observed_at": observed_at} if stale else {}
    staged = _scalar(connection, f"select count(*) from stage_{table}")
    if not staged:  # most sync pages stage no file and no new author
        return {"inserted": 0, "updated": 0, "unchanged": 0, "tombstoned": 0}
    row = connection.execute(
        f"select count(*) filter (where {changed}), count(*) "
        f"from stage_{table} as stage inner join {table} as target on {join}",
        observed,
    ).fetchone()
    updated, existing = row if row else (0, 0)
    if updated:
        assignments = ", ".join(
            f"{column} = {_stage_value(table, column)}" for column in columns if column not in keys
        )
        connection.execute(
            f"update {table} as target set {assignments}, latest_run_id = $run_id, "
            f"last_changed_at = $now from stage_{table} as stage where {join} and ({changed})",
            {"run_id": run_id, "now": now, **observed},
        )
    inserted = staged - existing
    if inserted:
        bookkeeping = ["latest_run_id", "last_changed_at"]
        values = ["$run_id", "$now"]
        if table == "messages":
            bookkeeping.append("first_seen_run_id")
            values.append("$run_id")
        connection.execute(
            f"insert into {table} ({', '.join(columns)}, {', '.join(bookkeeping)}) "
            f"select {', '.join(_stage_value(table, column) for column in columns)}, "
            f"{', '.join(values)} "
            f"from stage_{table} as stage where not exists "
            f"(select 1 from {table} as target where {join})",
            {"run_id": run_id, "now": now},
        )
    return {
        "inserted": inserted,
        "updated": updated,
        "unchanged": existing - updated,
        "tombstoned": 0,
    }


def _join(keys: tuple[str, ...]) -> str:
    return " and ".join(f"target.{key} = stage.{key}" for key in keys)


def _changed(table: str) -> str:
    """SQL: the staged row (`stage`) differs from the stored one (`target`)."""
    _, extra_compare = MERGE_RULES[table]
    return " or ".join(
        f"target.{column} is distinct from stage.{column}"
        for column in ("payload_hash", *extra_compare)
    )


def stale_rows(
    connection: duckdb.DuckDBPyConnection, table: str, observed_at: datetime
) -> dict[str, tuple[int, str | None]]:
    """Per stale rule of `table`: how many changed staged rows it keeps out, and the first
    one's key."""
    keys, _ = MERGE_RULES[table]
    rules = STALE_RULES.get(table, {})
    if not rules:
        return {}
    key = f"concat_ws(':', {', '.join(f'stage.{column}' for column in keys)})"
    row = connection.execute(
        "select "
        + ", ".join(
            f"count(*) filter (where {rule}), min({key}) filter (where {rule})"
            for rule in rules.values()
        )
        + f" from stage_{table} as stage inner join {table} as target on {_join(keys)}"
        + f" where {_changed(table)}",
        {"observed_at": observed_at},
    ).fetchone()
    assert row is not None
    found = zip(rules, row[0::2], row[1::2], strict=True)
    return {reason: (int(count), example) for reason, count, example in found if count}


def input_observed_at(connection: duckdb.DuckDBPyConnection, read_by: datetime) -> datetime:
    """The earliest moment the staged input can have been made: its newest message or edit.

    An export records no time of its own; its contents prove only that it was made after
    everything in it was written (and before `read_by`, the import's start, which bounds a
    bogus future ts). With no message staged it proves nothing: the epoch.
    """
    # Bounded in SQL: a ts far in the future (year 9999+) is no datetime at all.
    row = connection.execute(
        f"select greatest(least(coalesce(max(greatest(ts_us, coalesce({_ts_us('edited_ts')}, "
        "0))), 0), $read_by_us), 0) from stage_messages",
        {"read_by_us": datetime_to_us(read_by)},
    ).fetchone()
    newest_us = int(row[0]) if row else 0
    return us_to_datetime(newest_us)


def _stage_value(table: str, column: str) -> str:
    """How a staged column becomes a stored value.

    Staged messages carry `search_text` only when it differs from `text` (attachments or
    file titles), which keeps one copy of every text out of the staging memory.
    """
    if table == "messages" and column == "search_text":
        return "coalesce(stage.search_text, stage.text)"
    return f"stage.{column}"


def dedupe_stage_files(connection: duckdb.DuckDBPyConnection) -> None:
    """Keep one staged row per file: the earliest message that shared it."""
    connection.execute(
        "create or replace temp table stage_files as select * from stage_files "
        "qualify row_number() over (partition by workspace_id, file_id "
        "order by message_ts_us, channel_id, message_key) = 1"
    )


def mark_thread_parents(connection: duckdb.DuckDBPyConnection) -> None:
    """Roots with a staged reply are parents even when the export lacks `reply_count`."""
    connection.execute(
        "update stage_messages set is_thread_parent = true "
        "where thread_ts = ts and not is_thread_parent and exists ("
        "select 1 from stage_messages as reply where reply.channel_id = stage_messages.channel_id "
        "and reply.thread_ts = stage_messages.ts and reply.ts <> reply.thread_ts)"
    )


def tombstone_messages(
    connection: duckdb.DuckDBPyConnection,
    *,
    workspace_id: str,
    first_day: date,
    last_day: date,
    observed_at: datetime,
    run_id: str,
    now: datetime,
) -> int:
    """Mark as deleted the messages of covered conversation-days that the new input lacks.

    Only messages posted by `observed_at` (`input_observed_at`): the input was made after
    them, so their absence means deletion; a later one may postdate the input. A message
    the input held but skipped is no deletion: its key (`stage_skipped_keys`) or, when its
    ts was unusable, its whole conversation-day (`stage_skipped_days`) is left alone.
    """
    return _scalar(
        connection,
        "update messages set is_deleted = true, latest_run_id = $run_id, last_changed_at = $now "
        "where workspace_id = $workspace_id and not is_deleted "
        "and conversation_day between $first_day and $last_day and ts_us <= $observed_us "
        "and channel_id in (select channel_id from stage_covered) "
        "and not exists (select 1 from stage_messages as stage "
        "where stage.message_key = messages.message_key) "
        "and not exists (select 1 from stage_skipped_keys as skipped "
        "where skipped.message_key = messages.message_key) "
        "and not exists (select 1 from stage_skipped_days as skipped_day "
        "where skipped_day.channel_id = messages.channel_id "
        "and skipped_day.conversation_day = messages.conversation_day)",
        {
            "workspace_id": workspace_id,
            "first_day": first_day,
            "last_day": last_day,
            "observed_us": datetime_to_us(observed_at),
            "run_id": run_id,
            "now": now,
        },
    )


def tombstone_files(
    connection: duckdb.DuckDBPyConnection, *, workspace_id: str, run_id: str, now: datetime
) -> int:
    """Files whose message was tombstoned in this run, and not shared again, are deleted too."""
    return _scalar(
        connection,
        "update files set is_deleted = true, latest_run_id = $run_id, last_changed_at = $now "
        "where workspace_id = $workspace_id and not is_deleted "
        "and message_key in (select message_key from messages where workspace_id = $workspace_id "
        "and latest_run_id = $run_id and is_deleted) "
        "and not exists (select 1 from stage_files as stage "
        "where stage.workspace_id = files.workspace_id and stage.file_id = files.file_id)",
        {"workspace_id": workspace_id, "run_id": run_id, "now": now},
    )


class StoreBusy(SlackqueryError):
    """Another import or sync holds the canonical store's writer lock."""


@contextlib.contextmanager
def writer_lock(settings: Settings, holder: str | None = None) -> Iterator[None]:
    """The one lock every writer of the canonical store holds: `import` and `sync` (and
    `backup`, named as `holder`, to keep them out).

    DuckDB alone would refuse a second writer with a file-lock error mid-run; the flock
    refuses it up front with a message that says who holds it (and the kernel releases it
    when its holder dies, so a killed run never blocks the next).
    """
    path = settings.canonical_path
    lock = exclusive_lock(path.with_name(path.name + ".lock"), "another import or sync", holder)
    try:
        lock.__enter__()
    except SlackqueryError as error:
        raise StoreBusy(str(error)) from error
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def drop_stage_tables(connection: duckdb.DuckDBPyConnection) -> None:
    """Free the staging memory before commit."""
    for table in (
        "channels",
        "users",
        "messages",
        "files",
        "skipped_keys",
        "skipped_days",
        "covered",
    ):
        with contextlib.suppress(duckdb.Error):
            connection.execute(f"drop table if exists stage_{table}")


def _scalar(
    connection: duckdb.DuckDBPyConnection, sql: str, parameters: dict[str, Any] | None = None
) -> int:
    row = connection.execute(sql, parameters or {}).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


# Dates only from a ts a datetime can hold (a store written before imports refused later
# ones may have some).
STORE_SUMMARY_SQL = f"""
select
    (select count(*) from workspaces),
    (select count(*) from channels),
    (select count(*) from users),
    count(*) filter (where not is_deleted),
    count(*) filter (where not is_deleted and is_thread_parent),
    min(ts_us) filter (where not is_deleted and ts_us <= {LAST_STORABLE_US}),
    max(ts_us) filter (where not is_deleted and ts_us <= {LAST_STORABLE_US})
from messages
"""


def summarize(path: Path) -> dict[str, Any]:
    """What the whole store holds: workspaces, channels, users, messages, threads, dates."""
    connection = duckdb.connect(str(path), read_only=True)
    try:
        row = connection.execute(STORE_SUMMARY_SQL).fetchone()
    finally:
        connection.close()
    assert row is not None
    first, last = (
        us_to_datetime(value).date().isoformat() if value is not None else None
        for value in row[5:7]
    )
    keys = ("workspaces", "channels", "users", "messages", "threads")
    return {**dict(zip(keys, row[:5], strict=True)), "first_date": first, "last_date": last}
