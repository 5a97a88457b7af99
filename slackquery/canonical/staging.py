"""What every input format's loader shares: warnings, the batched stage writer, the tail.

A loader (one module per format in `slackquery/canonical/formats/`) reads its input,
turns it into canonical rows with the builders in `rows`, and hands them to a `Staging`;
`Staging.finish` writes the stage tables the merge reads and describes what was staged.
"""

from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any, Literal

import duckdb
import orjson

from slackquery.canonical import store
from slackquery.canonical.rows import (
    MESSAGE_COLUMNS,
    SORTED,
    ChannelRow,
    FileRow,
    TsAfterYear9999,
    UserRow,
    file_row,
    message_files,
    message_row,
    message_ts,
    unreadable_ts,
    unstorable,
    us_to_ts,
)
from slackquery.settings import Settings

if TYPE_CHECKING:
    from slackquery.canonical.authors import Authors

MAX_LISTED_WARNINGS = 1000
STAGE_BATCH_ROWS = 50_000


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


# Which of an input's rows, found in another stored workspace, show it is a copy of it.
CopyEvidence = Literal["channels", "messages"]


@dataclass
class Staged:
    """What a loader produced for the merge: identity, coverage and row counts.

    `copy_evidence` is set when the input carries no Slack team id, so that its workspace id
    is a slug (`--workspace-slug`, else taken from the file name): unless the slug was given,
    the merge checks by these rows that it does not start a second copy of a stored workspace.
    `snapshot`: the input's message times bound when it was made, as an export of a live
    workspace's do; a Beacon corpus's dates belong to its story, not to its file.
    """

    workspace_id: str
    team_name_hint: str | None
    source_format: str
    covered_channels: list[str]
    first_day: date | None
    last_day: date | None
    messages_staged: int = 0
    messages_skipped: int = 0
    copy_evidence: CopyEvidence | None = None
    snapshot: bool = True


class StageBuffer:
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
        """Add one row; flush when the batch is full."""
        self.rows.append(row)
        if len(self.rows) >= STAGE_BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Write the batch to `stage_<table>`."""
        store.stage_frame(self.connection, self.table, self.columns, self.rows)
        self.total += len(self.rows)
        self.rows = []


class Staging:
    """One loader's output on its way to the stage tables: messages, files, skips, days."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        warnings: Warnings,
        workspace_id: str,
        settings: Settings,
    ) -> None:
        self.connection = connection
        self.workspace_id = workspace_id
        self.warnings = warnings
        self.max_message_bytes = settings.max_message_bytes
        self.messages = StageBuffer(connection, "messages", MESSAGE_COLUMNS)
        self.files: list[FileRow] = []
        self.skipped = 0
        self.skipped_keys: list[str] = []
        self.skipped_days: set[tuple[str, str]] = set()  # (channel_id, day)
        self.days: list[str] = []

    def skip(self, where: str, problem: str) -> None:
        """Count one skipped input message, with the warning that says why."""
        self.warnings.add(where, problem)
        self.skipped += 1

    def oversize(self, where: str, label: str, key: str, canonical: bytes) -> bool:
        """Skip (and remember, so it is not tombstoned) a message over the size limit."""
        if len(canonical) <= self.max_message_bytes:
            return False
        self.skip(
            where,
            f"message {label} is {len(canonical):,} bytes (limit "
            f"{self.max_message_bytes:,}, settings.max_message_bytes): skipped",
        )
        self.skipped_keys.append(key)
        return True

    def valid_ts(
        self, where: str, message: Any, *, allow_number: bool = False
    ) -> tuple[str, int] | None:
        """`(ts, ts_us)` of the message (`rows.message_ts`), or None, skipped with a warning:
        not an object, no valid ts, or one after the year 9999. `allow_number`: a ts written
        as a JSON number counts when it converts exactly (exports; the Web API writes strings).
        """
        if not isinstance(message, dict):
            self.skip(where, "entry that is not a JSON object skipped")
            return None
        ts = message.get("ts")
        try:
            return message_ts(ts, allow_number=allow_number)
        except TsAfterYear9999 as error:
            self.skip(where, f"message ts={error} lies after the year 9999: skipped")
        except ValueError:
            self.skip(where, f"message without a valid ts ({ts!r}) skipped")
        return None

    def protect_day(self, channel_id: str, day: str) -> None:
        """Keep every stored message of a conversation-day from being tombstoned: a message
        of it was skipped without a key (no valid ts), so any of them may be its copy."""
        self.skipped_days.add((channel_id, day))

    def add_slack_message(
        self,
        message: dict[str, Any],
        *,
        authors: "Authors",
        channel_id: str,
        ts_us: int,
        day: str,
        where: str,
        seen: set[str] | None = None,
        local_paths: dict[str, str] | None = None,
    ) -> None:
        """Stage a Slack message object: what the store can hold, duplicates (when `seen`),
        its author. It is keyed on its canonical ts (`us_to_ts(ts_us)`, see `message_ts`),
        so two spellings of one ts are one message and the second is a duplicate."""
        ts = us_to_ts(ts_us)
        key = f"{self.workspace_id}:{channel_id}:{ts}"
        canonical = self._canonical(where, message, key, ts)
        if canonical is None:
            return
        if seen is not None:
            if key in seen:
                self.skip(where, f"duplicate message ts={_shown_ts(message, ts)} skipped")
                return
            seen.add(key)
        problem = unstorable(message)
        if problem is not None:
            self.skip(where, f"message ts={ts} {problem}: skipped")
            self.skipped_keys.append(key)
            return
        for problem in unreadable_ts(message):
            self.warnings.add(where, f"message ts={ts} {problem}")
        authors.note(message, where)
        self.add_message(
            message,
            channel_id=channel_id,
            ts=ts,
            ts_us=ts_us,
            day=day,
            canonical=canonical,
            bot_user_ids=authors.bot_user_ids,
            local_paths=local_paths,
        )

    def _canonical(self, where: str, message: dict[str, Any], key: str, ts: str) -> bytes | None:
        """The message's canonical JSON; None (skipped, and remembered so it is not
        tombstoned) when it has none (a lone surrogate in a string) or is over the size limit."""
        label = f"ts={ts}"
        try:
            canonical = orjson.dumps(message, option=SORTED)
        except orjson.JSONEncodeError as error:
            self.skip(where, f"message {label} is not storable as JSON ({error}): skipped")
            self.skipped_keys.append(key)
            return None
        if self.oversize(where, label, key, canonical):
            return None
        return canonical

    def add_message(
        self,
        message: dict[str, Any],
        *,
        channel_id: str,
        ts: str,
        ts_us: int,
        day: str,
        canonical: bytes,
        source_message_id: str | None = None,
        bot_user_ids: frozenset[str] | set[str] = frozenset(),
        local_paths: dict[str, str] | None = None,
    ) -> None:
        """Stage one message and the files it shares."""
        for file in message_files(message):
            row = file_row(
                file,
                workspace_id=self.workspace_id,
                message_key=f"{self.workspace_id}:{channel_id}:{ts}",
                channel_id=channel_id,
                ts=ts,
                ts_us=ts_us,
                local_paths=local_paths or {},
            )
            if row is not None:
                self.files.append(row)
        self.messages.append(
            message_row(
                message,
                workspace_id=self.workspace_id,
                channel_id=channel_id,
                ts=ts,
                ts_us=ts_us,
                day=day,
                canonical=canonical,
                source_message_id=source_message_id,
                bot_user_ids=bot_user_ids,
            )
        )

    def flush(self) -> None:
        """Write the staged messages and files."""
        self.messages.flush()
        store.stage_frame(self.connection, "files", store.FILE_STAGE_COLUMNS, self.files)
        self.files = []

    def finish(
        self,
        *,
        source_format: str,
        users: list[UserRow],
        channels: list[ChannelRow],
        team_name_hint: str | None = None,
        copy_evidence: CopyEvidence | None = None,
        snapshot: bool = True,
        covered: list[str] | None = None,
    ) -> Staged:
        """Write every remaining stage table and describe what was staged.

        `covered`: the conversations whose messages the input holds for its whole span (for
        an export, those with day files in it); by default every staged channel.
        """
        self.flush()
        store.stage_frame(self.connection, "users", store.USER_COLUMNS, users)
        store.stage_frame(self.connection, "channels", store.CHANNEL_COLUMNS, channels)
        store.stage_values(self.connection, "skipped_keys", self.skipped_keys)
        store.stage_skipped_days(self.connection, sorted(self.skipped_days))
        if covered is None:
            covered = [row.channel_id for row in channels]
        store.stage_values(self.connection, "covered", covered)
        return Staged(
            workspace_id=self.workspace_id,
            team_name_hint=team_name_hint,
            source_format=source_format,
            covered_channels=covered,
            first_day=date.fromisoformat(min(self.days)) if self.days else None,
            last_day=date.fromisoformat(max(self.days)) if self.days else None,
            messages_staged=self.messages.total,
            messages_skipped=self.skipped,
            copy_evidence=copy_evidence,
            snapshot=snapshot,
        )


def _shown_ts(message: dict[str, Any], ts: str) -> str:
    """How a warning names a message's ts: canonical, and as written when that differs
    (the input holds `01709556215.249305`, not the key it was read as)."""
    given = message.get("ts")
    return ts if given == ts else f"{ts} (written {given!r})"
