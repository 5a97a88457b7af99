"""Beacon JSON-lines loader: one chat file becomes one workspace with synthetic Slack ids.

Each line is `{local_id, channel, author, created_at, parent_id, text}`. Channel and user
ids are hashes of their names (the same in every run), each message gets a unique ts
from its creation time (bumped by a microsecond on ties), and parent links become
one-level Slack threads. Every line is validated before the transaction starts.
"""

import hashlib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson

from slackquery.canonical.rows import (
    LAST_STORABLE_US,
    ChannelRow,
    UserRow,
    canonical_json,
    datetime_to_us,
    raw_columns,
    us_to_datetime,
    us_to_ts,
)
from slackquery.canonical.sources import iter_jsonl
from slackquery.canonical.staging import Staged, Staging, Warnings
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

# (line number, record, created_at in µs)
Record = tuple[int, dict[str, Any], int]


def stable_id(prefix: str, name: str) -> str:
    """A Slack-looking id (`C3F2A9…`) that is the same for the same name in every run."""
    return prefix + hashlib.sha256(name.encode("utf-8")).hexdigest()[:10].upper()


class BeaconLoader:
    """Stages a Beacon JSON-lines chat file as one workspace with synthetic Slack ids."""

    def __init__(self, settings: Settings, path: Path, slug_hint: str, warnings: Warnings) -> None:
        self.settings = settings
        self.path = path
        self.warnings = warnings
        self.workspace_id = slug_hint
        self.has_team_id = False  # named by its slug (`--workspace-slug` or its file name)
        self.records = self._read()

    def _read(self) -> list[Record]:
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
            created_us = datetime_to_us(created)
            # A Slack ts counts seconds since 1970 and names a day up to the year 9999.
            if not 0 <= created_us <= LAST_STORABLE_US:
                raise SlackqueryError(
                    f"{where}: created_at {record['created_at']!r} lies before 1970 or after "
                    "the year 9999 (UTC)"
                )
            records.append((number, record, created_us))
        if not records:
            raise SlackqueryError(f"{self.path.name}: empty input (no JSON lines)")
        return records

    def stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        """Assign ids, unique ts and threads, then stage users, channels and messages."""
        staging = Staging(connection, self.warnings, self.workspace_id, self.settings)
        by_channel: dict[str, list[Record]] = {}
        for item in self.records:
            by_channel.setdefault(str(item[1]["channel"]), []).append(item)
        authors: dict[str, str] = {}
        channels = [
            self._stage_channel(staging, channel, by_channel[channel], authors)
            for channel in sorted(by_channel)
        ]
        users = [
            _user_row(self.workspace_id, user_id, author)
            for user_id, author in sorted(authors.items())
        ]
        return staging.finish(
            source_format="beacon_jsonl",
            users=users,
            channels=channels,
            copy_evidence="messages",  # named by its file; channel ids are hashes of names
            snapshot=False,  # a corpus: its dates are its story's
        )

    def _stage_channel(
        self, staging: Staging, channel: str, items: list[Record], authors: dict[str, str]
    ) -> ChannelRow:
        """Stage one channel's messages; return its channels row."""
        channel_id = stable_id("C", channel)
        ordered, assigned = self._assign_ts(staging, channel, items)
        parents: dict[str, str | None] = {
            str(record["local_id"]): self._parent(record, assigned, channel, number)
            for number, record, _ts_us in ordered
        }
        roots = {local_id: _thread_root(local_id, parents) for local_id in parents}
        reply_counts: Counter[str] = Counter()
        for local_id, root in roots.items():
            if root is not None and root != local_id:
                reply_counts[root] += 1
        for number, record, ts_us in ordered:
            local_id = str(record["local_id"])
            user_id = stable_id("U", str(record["author"]))
            authors[user_id] = str(record["author"])
            ts = assigned[local_id][0]
            key = f"{self.workspace_id}:{channel_id}:{ts}"
            canonical = canonical_json(record)
            if staging.oversize(f"{self.path.name}:{number}", repr(local_id), key, canonical):
                continue
            root = roots[local_id]
            replies = reply_counts.get(local_id, 0)
            thread_ts = None
            if root is not None and root != local_id:
                thread_ts = assigned[root][0]
            elif replies:
                thread_ts = ts
            day = datetime.fromtimestamp(ts_us // 1_000_000, UTC).date().isoformat()
            staging.days.append(day)
            message = {
                "ts": ts,
                "user": user_id,
                "text": record.get("text") or "",
                "thread_ts": thread_ts,
                "reply_count": replies or None,
            }
            staging.add_message(
                message,
                channel_id=channel_id,
                ts=ts,
                ts_us=ts_us,
                day=day,
                canonical=canonical,
                source_message_id=f"synthetic:{channel}:{local_id}",
            )
        return self._channel_row(channel_id, channel, ordered)

    def _assign_ts(
        self, staging: Staging, channel: str, items: list[Record]
    ) -> tuple[list[Record], dict[str, tuple[str, int]]]:
        """Order a channel's records by time and give each a unique ts; skip duplicate ids."""
        assigned: dict[str, tuple[str, int]] = {}  # local_id -> (ts, line)
        ordered = []
        last_us = None
        for number, record, created_us in sorted(items, key=lambda item: (item[2], item[0])):
            local_id = str(record["local_id"])
            if local_id in assigned:
                staging.skip(
                    f"{self.path.name}:{number}",
                    f"duplicate local_id {local_id!r} in channel {channel!r} skipped",
                )
                continue
            ts_us = created_us if last_us is None or created_us > last_us else last_us + 1
            last_us = ts_us
            assigned[local_id] = (us_to_ts(ts_us), number)
            ordered.append((number, record, ts_us))
        return ordered, assigned

    def _channel_row(self, channel_id: str, channel: str, ordered: list[Record]) -> ChannelRow:
        """A public channel whose members are its authors and whose creator posted first."""
        member_ids = sorted({stable_id("U", str(record["author"])) for _, record, _ in ordered})
        created_us = ordered[0][2] if ordered else None
        raw_json, digest = raw_columns(
            {
                "id": channel_id,
                "name": channel,
                "members": member_ids,
                "created_ts": us_to_ts(created_us) if created_us is not None else None,
            }
        )
        return ChannelRow(
            workspace_id=self.workspace_id,
            channel_id=channel_id,
            name=channel,
            conversation_type="public_channel",
            is_archived=False,
            is_general=False,
            created_at=us_to_datetime(created_us) if created_us is not None else None,
            creator_id=stable_id("U", str(ordered[0][1]["author"])) if ordered else None,
            topic=None,
            purpose=None,
            member_ids=orjson.dumps(member_ids).decode(),
            export_folder=channel,
            raw_json=raw_json,
            payload_hash=digest,
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


def _user_row(workspace_id: str, user_id: str, author: str) -> UserRow:
    """An author known only by name: handle and display name both carry it."""
    raw_json, digest = raw_columns({"id": user_id, "name": author})
    return UserRow(
        workspace_id=workspace_id,
        user_id=user_id,
        username=author,
        real_name=None,
        display_name=author,
        title=None,
        tz=None,
        is_bot=False,
        is_deleted=False,
        is_admin=False,
        raw_json=raw_json,
        payload_hash=digest,
    )


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
