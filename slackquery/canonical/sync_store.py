"""The canonical store as `sync` writes it: one transaction per page, checkpoint included.

Every page of `conversations.history` or `conversations.replies` is staged and merged by
the importer's own rules (`store.merge_table`), and the same transaction records what the
pass has seen and where it goes on (`sync_channels`, `sync_threads`, `sync_seen`), when
each thread and member list was last read whole (`sync_thread_reads`,
`sync_member_reads`), and where the sweep of a channel's older history goes on
(`sync_history_sweeps`). A sync killed at any instant therefore resumes from its last commit:
nothing is duplicated, nothing half-written is visible, and only the page in flight is
fetched again.

A pass over a channel reads the history between two bounds; when it and the threads it
queued are read, the messages in those bounds that no page returned are tombstoned. A
page of older history a sweep re-reads tombstones what it no longer returns between its
oldest message and where it ends. A thread Slack no longer has is tombstoned whole; a
conversation the token lost is closed (`close_conversation`: no members, and not public;
see `slackquery.slack.sync`).
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from slackquery.canonical import store
from slackquery.canonical.authors import Authors
from slackquery.canonical.rows import (
    MESSAGE_COLUMNS,
    ChannelRow,
    UserRow,
    ts_to_us,
)
from slackquery.canonical.staging import Staging, Warnings
from slackquery.crash import crash_point
from slackquery.settings import Settings

HISTORY = "history"
# Recorded as seen for an entry a read returned without a usable ts: which stored message
# it was cannot be told, so the read tombstones nothing (it is no ts itself).
UNKEYED = "?"
TABLES = ("users", "channels", "messages", "files")


@dataclass(frozen=True)
class ChannelPass:
    """A channel's checkpoint: where the pass in progress stands (None: no pass open)."""

    synced_through_ts: str | None
    oldest_ts: str | None
    latest_ts: str | None
    cursor: str | None
    history_done: bool

    @property
    def open(self) -> bool:
        """Whether a pass is in progress (begun and not finished)."""
        return self.latest_ts is not None


@dataclass(frozen=True)
class StoredConversation:
    """A conversation as the store holds it: enough to name it, to know who may see it, and
    to know when a sync last read it."""

    name: str
    conversation_type: str
    pass_open: bool  # a pass was begun and not finished (a run stopped inside it)
    synced_at: datetime  # when its turn last came (a sync began reading it) or it last moved


@dataclass(frozen=True)
class StoredMembers:
    """A conversation's stored member list (None: none stored) and when sync read it."""

    member_ids: list[str] | None
    read_at: datetime | None


def _zero_counts() -> dict[str, dict[str, int]]:
    return {
        table: {"inserted": 0, "updated": 0, "unchanged": 0, "tombstoned": 0} for table in TABLES
    }


class SyncStore:
    """The writing connection of one sync run, with its running counts."""

    def __init__(self, settings: Settings, run_id: str, warnings: Warnings) -> None:
        self.settings = settings
        self.run_id = run_id
        self.warnings = warnings
        self.counts = _zero_counts()
        self.pages_written = 0
        self.connection = store.open_store(settings.canonical_path, settings.import_memory_limit)
        self.connection.begin()
        store.install_schema(self.connection, datetime.now(UTC))
        self.connection.commit()
        store.create_stage_tables(self.connection)

    def close(self) -> None:
        """Drop the stage tables and close the connection."""
        store.drop_stage_tables(self.connection)
        self.connection.close()

    def _merge(self, table: str, columns: tuple[str, ...], observed_at: datetime) -> None:
        """Merge a stage table; a page's rows are stamped with the time they were read."""
        counts = store.merge_table(
            self.connection,
            table,
            columns,
            run_id=self.run_id,
            now=observed_at,
            observed_at=observed_at,
        )
        for kind, value in counts.items():
            self.counts[table][kind] += value

    def _clear_stage(self) -> None:
        for table in ("users", "channels", "messages", "files"):
            self.connection.execute(f"delete from stage_{table}")

    def stored_members(self, workspace_id: str) -> dict[str, StoredMembers]:
        """Each stored conversation's member list and when a sync last read it."""
        rows = self.connection.execute(
            "select channel_id, member_ids, read_at from channels "
            "left join sync_member_reads using (workspace_id, channel_id) "
            "where workspace_id = ?",
            [workspace_id],
        ).fetchall()
        return {
            channel_id: StoredMembers(members, read_at) for channel_id, members, read_at in rows
        }

    def write_directory(
        self,
        users: list[UserRow],
        channels: list[ChannelRow],
        now: datetime,
        members_read: set[str],
    ) -> None:
        """Merge the workspace's users and channels (names, membership, archival) at once,
        and record that the member lists of the channels in `members_read` were read now."""
        self.connection.begin()
        self._clear_stage()
        store.stage_frame(self.connection, "users", store.USER_COLUMNS, users)
        store.stage_frame(self.connection, "channels", store.CHANNEL_COLUMNS, channels)
        self._merge("users", store.USER_COLUMNS, now)
        self._merge("channels", store.CHANNEL_COLUMNS, now)
        read = [row for row in channels if row.channel_id in members_read]
        if read:
            self.connection.execute(
                "insert or replace into sync_member_reads select unnest($w), unnest($c), $now",
                {
                    "w": [row.workspace_id for row in read],
                    "c": [row.channel_id for row in read],
                    "now": now,
                },
            )
        self.connection.commit()

    def channel_pass(self, workspace_id: str, channel_id: str) -> ChannelPass:
        """The channel's checkpoint (an empty one for a channel never synced)."""
        row = self.connection.execute(
            "select synced_through_ts, pass_oldest_ts, pass_latest_ts, pass_cursor, "
            "coalesce(pass_history_done, false) from sync_channels "
            "where workspace_id = ? and channel_id = ?",
            [workspace_id, channel_id],
        ).fetchone()
        return ChannelPass(*row) if row else ChannelPass(None, None, None, None, False)

    def begin_pass(
        self,
        workspace_id: str,
        channel_id: str,
        *,
        oldest_ts: str,
        latest_ts: str,
        active_since_us: int,
        now: datetime,
    ) -> None:
        """Open a pass over (oldest, latest) and queue the store's recently active threads."""
        self.connection.begin()
        self.connection.execute(
            "insert into sync_channels values ($w, $c, null, $oldest, $latest, null, false, $now) "
            "on conflict do update set pass_oldest_ts = excluded.pass_oldest_ts, "
            "pass_latest_ts = excluded.pass_latest_ts, pass_cursor = null, "
            "pass_history_done = false, updated_at = excluded.updated_at",
            {
                "w": workspace_id,
                "c": channel_id,
                "oldest": oldest_ts,
                "latest": latest_ts,
                "now": now,
            },
        )
        self.connection.execute(
            "insert into sync_threads "
            "select workspace_id, channel_id, thread_ts, null from messages "
            "where workspace_id = $w and channel_id = $c and is_thread_reply and not is_deleted "
            "group by 1, 2, 3 having max(ts_us) >= $since on conflict do nothing",
            {"w": workspace_id, "c": channel_id, "since": active_since_us},
        )
        self.connection.commit()

    def stored_thread_heads(
        self, workspace_id: str, channel_id: str, thread_ts: list[str]
    ) -> dict[str, tuple[str | None, int | None]]:
        """(latest_reply, reply_count) of the stored parents of these threads."""
        if not thread_ts:
            return {}
        rows = self.connection.execute(
            "select ts, raw_json->>'latest_reply', reply_count from messages "
            "where workspace_id = ? and channel_id = ? and ts in (select unnest(?)) "
            "and not is_deleted",
            [workspace_id, channel_id, thread_ts],
        ).fetchall()
        return {ts: (latest, count) for ts, latest, count in rows}

    def queue_quiet_threads(
        self,
        workspace_id: str,
        channel_ids: list[str],
        *,
        quiet_since_us: int,
        active_since_us: int,
        read_before: datetime,
        limit: int,
    ) -> int:
        """Queue up to `limit` of these channels' threads whose last stored reply lies in
        [quiet_since, active_since) and that were not read whole since `read_before`, least
        recently read first (never read: first; then the most recently active), and return
        how many were queued."""
        if limit <= 0 or not channel_ids:
            return 0
        keys = {"w": workspace_id, "c": channel_ids, "quiet": quiet_since_us, "read": read_before}
        self.connection.begin()
        queued = self.connection.execute(
            "insert into sync_threads by name "
            "select workspace_id, channel_id, thread_ts from ("
            "  select workspace_id, channel_id, thread_ts, max(ts_us) as last_reply_us "
            "  from messages where workspace_id = $w and channel_id in (select unnest($c)) "
            "  and is_thread_reply and not is_deleted group by all "
            "  having max(ts_us) >= $quiet and max(ts_us) < $active"
            ") left join sync_thread_reads using (workspace_id, channel_id, thread_ts) "
            "where read_at is null or read_at < $read "
            "order by read_at nulls first, last_reply_us desc, channel_id, thread_ts "
            "limit $limit on conflict do nothing returning thread_ts",
            {**keys, "active": active_since_us, "limit": limit},
        ).fetchall()
        self.connection.commit()
        return len(queued)

    def history_sweep_turns(
        self, workspace_id: str, channel_ids: list[str], limit: int
    ) -> dict[str, str | None]:
        """Up to `limit` of these channels whose older history is least recently swept
        (never swept: first), each with where its next sweep page ends (None: at the pass's
        lower bound)."""
        if limit <= 0 or not channel_ids:
            return {}
        rows = self.connection.execute(
            "select wanted.channel_id, sweeps.before_ts "
            "from (select unnest($c) as channel_id) as wanted "
            "left join sync_history_sweeps as sweeps "
            "on sweeps.workspace_id = $w and sweeps.channel_id = wanted.channel_id "
            "order by sweeps.swept_at nulls first, wanted.channel_id limit $limit",
            {"w": workspace_id, "c": channel_ids, "limit": limit},
        ).fetchall()
        return dict(rows)

    def pending_threads(self, workspace_id: str, channel_id: str) -> list[tuple[str, str | None]]:
        """(thread_ts, reply cursor) of the threads the pass still has to read, oldest first."""
        return self.connection.execute(
            "select thread_ts, reply_cursor from sync_threads where workspace_id = ? "
            "and channel_id = ? order by thread_ts",
            [workspace_id, channel_id],
        ).fetchall()

    def write_page(
        self,
        workspace_id: str,
        channel_id: str,
        messages: list[Any],
        *,
        authors: Authors,
        scope: str,
        next_cursor: str | None,
        observed_at: datetime,
        queue_threads: list[str] = (),  # type: ignore[assignment]
        where: str,
    ) -> None:
        """Merge one page and move its checkpoint, in one transaction."""
        self.connection.begin()
        seen = self._merge_page(workspace_id, channel_id, messages, authors, observed_at, where)
        self._record_seen(workspace_id, channel_id, scope, seen)
        self._move_checkpoint(
            workspace_id, channel_id, scope, next_cursor, queue_threads, observed_at
        )
        self._commit_page()

    def write_sweep_page(
        self,
        workspace_id: str,
        channel_id: str,
        messages: list[Any],
        *,
        authors: Authors,
        oldest_ts: str,
        latest_ts: str,
        has_more: bool,
        observed_at: datetime,
        queue_threads: list[str],
        where: str,
    ) -> None:
        """Merge one page of older history read between `oldest_ts` and `latest_ts`, in one
        transaction: the stored top-level messages from its oldest message up to `latest_ts`
        that it did not return are gone, and the next sweep ends at that oldest message (or,
        when Slack holds nothing older, starts again from the re-read window).

        Nothing older than the page's oldest message is tombstoned: history Slack stops
        returning (a free workspace's, hidden after 90 days) stays as stored. A message the
        page holds outside the bounds asked for marks no range, and a page with an entry
        without a usable ts tombstones nothing.
        """
        self.connection.begin()
        seen = self._merge_page(workspace_id, channel_id, messages, authors, observed_at, where)
        keys = {"w": workspace_id, "c": channel_id}
        lower, upper = ts_to_us(oldest_ts), ts_to_us(latest_ts)
        asked = [ts for ts in seen if ts != UNKEYED and lower < ts_to_us(ts) < upper]
        oldest = min(asked, key=ts_to_us) if asked else None
        if oldest is not None and UNKEYED not in seen:
            self._tombstone(
                "channel_id = $c and ts_us >= $oldest and ts_us < $latest "
                "and (not is_thread_reply or is_thread_broadcast) "
                "and ts not in (select unnest($seen))",
                {**keys, "oldest": ts_to_us(oldest), "latest": ts_to_us(latest_ts), "seen": seen},
                observed_at,
            )
        self.connection.execute(
            "insert or replace into sync_history_sweeps values ($w, $c, $before, $now)",
            {**keys, "before": oldest if has_more else None, "now": observed_at},
        )
        self._queue_threads(workspace_id, channel_id, queue_threads)
        self._commit_page()

    def _merge_page(
        self,
        workspace_id: str,
        channel_id: str,
        messages: list[Any],
        authors: Authors,
        observed_at: datetime,
        where: str,
    ) -> list[str]:
        """Stage and merge a page's messages, files and new authors; return every valid ts."""
        self._clear_stage()
        seen = self._stage_messages(workspace_id, channel_id, messages, authors, where)
        store.stage_frame(
            self.connection, "users", store.USER_COLUMNS, authors.new_rows(workspace_id)
        )
        store.mark_thread_parents(self.connection)
        store.dedupe_stage_files(self.connection)
        self._merge("users", store.USER_COLUMNS, observed_at)
        self._merge("messages", MESSAGE_COLUMNS, observed_at)
        self._merge("files", store.FILE_COLUMNS, observed_at)
        return seen

    def _commit_page(self) -> None:
        self.pages_written += 1
        crash_point(f"sync_before_page_commit_{self.pages_written}")
        self.connection.commit()

    def _stage_messages(
        self,
        workspace_id: str,
        channel_id: str,
        messages: list[Any],
        authors: Authors,
        where: str,
    ) -> list[str]:
        """Stage a page's messages with the importer's checks; return every valid ts, and
        `UNKEYED` when an entry had none.

        A ts the page repeats is staged once (a warning names it), as an import does.
        A message skipped for what it holds counts as seen: a pass never tombstones it.
        """
        staging = Staging(self.connection, self.warnings, workspace_id, self.settings)
        seen: dict[str, None] = {}
        on_page: set[str] = set()
        for message in messages:
            found = staging.valid_ts(where, message)
            if found is None:
                seen[UNKEYED] = None
                continue
            ts, ts_us = found
            seen[ts] = None
            day = datetime.fromtimestamp(ts_us // 1_000_000, UTC).date().isoformat()
            staging.add_slack_message(
                message,
                authors=authors,
                channel_id=channel_id,
                ts_us=ts_us,
                day=day,
                where=where,
                seen=on_page,
            )
        staging.flush()
        return list(seen)

    def _record_seen(self, workspace_id: str, channel_id: str, scope: str, seen: list[str]) -> None:
        if seen:
            self.connection.execute(
                "insert into sync_seen select $w, $c, $scope, unnest($ts) on conflict do nothing",
                {"w": workspace_id, "c": channel_id, "scope": scope, "ts": seen},
            )

    def _move_checkpoint(
        self,
        workspace_id: str,
        channel_id: str,
        scope: str,
        next_cursor: str | None,
        queue_threads: list[str],
        now: datetime,
    ) -> None:
        keys = {"w": workspace_id, "c": channel_id}
        if scope == HISTORY:
            self.connection.execute(
                "update sync_channels set pass_cursor = $cursor, "
                "pass_history_done = $done, updated_at = $now "
                "where workspace_id = $w and channel_id = $c",
                {**keys, "cursor": next_cursor, "done": next_cursor is None, "now": now},
            )
        elif next_cursor is not None:
            self.connection.execute(
                "update sync_threads set reply_cursor = $cursor "
                "where workspace_id = $w and channel_id = $c and thread_ts = $t",
                {**keys, "cursor": next_cursor, "t": scope},
            )
        else:
            self._finish_thread(workspace_id, channel_id, scope, now)
        self._queue_threads(workspace_id, channel_id, queue_threads)

    def _queue_threads(self, workspace_id: str, channel_id: str, threads: list[str]) -> None:
        if threads:
            self.connection.execute(
                "insert into sync_threads select $w, $c, unnest($t), null on conflict do nothing",
                {"w": workspace_id, "c": channel_id, "t": list(threads)},
            )

    def _finish_thread(
        self, workspace_id: str, channel_id: str, thread_ts: str, now: datetime
    ) -> None:
        """The whole thread was read: its stored replies that no page returned are gone."""
        keys = {"w": workspace_id, "c": channel_id, "t": thread_ts}
        if not self._saw_unkeyed(workspace_id, channel_id, thread_ts):
            self._tombstone(
                "channel_id = $c and thread_ts = $t and is_thread_reply "
                "and ts not in (select ts from sync_seen where workspace_id = $w "
                "and channel_id = $c and scope = $t)",
                keys,
                now,
            )
        self.connection.execute(
            "delete from sync_threads where workspace_id = $w and channel_id = $c "
            "and thread_ts = $t",
            keys,
        )
        self.connection.execute(
            "insert or replace into sync_thread_reads values ($w, $c, $t, $now)",
            {**keys, "now": now},
        )
        self.connection.execute(
            "delete from sync_seen where workspace_id = $w and channel_id = $c and scope = $t",
            keys,
        )

    def forget_thread(
        self, workspace_id: str, channel_id: str, thread_ts: str, now: datetime
    ) -> None:
        """Slack says the thread does not exist (`thread_not_found`): all of it is gone.

        Its stored replies are tombstoned as a read that saw none of them would (what earlier
        pages of this read saw no longer counts), and the queue forgets it, in one transaction.
        So is its parent: Slack answers so only when no message has that ts, and a parent
        older than the re-read window is on no page that could show it gone.
        """
        keys = {"w": workspace_id, "c": channel_id, "t": thread_ts}
        self.connection.begin()
        self.connection.execute(
            "delete from sync_seen where workspace_id = $w and channel_id = $c and scope = $t",
            keys,
        )
        self._finish_thread(workspace_id, channel_id, thread_ts, now)
        self._tombstone("channel_id = $c and ts = $t", keys, now)
        self.connection.commit()

    def restart_read(self, workspace_id: str, channel_id: str, scope: str) -> None:
        """Read the history of the pass (`scope` HISTORY) or a thread again from its first
        page: Slack rejected its saved cursor. What earlier pages saw is read again."""
        keys = {"w": workspace_id, "c": channel_id, "scope": scope}
        self.connection.begin()
        self.connection.execute(
            "delete from sync_seen where workspace_id = $w and channel_id = $c and scope = $scope",
            keys,
        )
        if scope == HISTORY:
            self.connection.execute(
                "update sync_channels set pass_cursor = null "
                "where workspace_id = $w and channel_id = $c",
                {"w": workspace_id, "c": channel_id},
            )
        else:
            self.connection.execute(
                "update sync_threads set reply_cursor = null "
                "where workspace_id = $w and channel_id = $c and thread_ts = $scope",
                keys,
            )
        self.connection.commit()

    def synced_conversations(self, workspace_id: str) -> dict[str, StoredConversation]:
        """The conversations a sync of this workspace has read before, by channel id."""
        rows = self.connection.execute(
            "select channel_id, channels.name, channels.conversation_type, "
            "pass_latest_ts is not null, updated_at from sync_channels "
            "inner join channels using (workspace_id, channel_id) where workspace_id = ?",
            [workspace_id],
        ).fetchall()
        return {channel_id: StoredConversation(*row) for channel_id, *row in rows}

    def close_conversation(self, workspace_id: str, channel_id: str, now: datetime) -> bool:
        """Make a conversation private with no members, so that only the operator sees it;
        return whether it was open (a closed one is left as it is).

        Counted, stamped and restored like any channel change: the next directory merge that
        reads it from Slack finds its type and members different and writes them back.
        """
        changed = self.connection.execute(
            "update channels set member_ids = []::varchar[], conversation_type = case "
            "when conversation_type = 'public_channel' then 'private_channel' "
            "else conversation_type end, latest_run_id = $run_id, last_changed_at = $now "
            "where workspace_id = $w and channel_id = $c "
            "and (member_ids is distinct from []::varchar[] "
            "or conversation_type = 'public_channel')",
            {"w": workspace_id, "c": channel_id, "run_id": self.run_id, "now": now},
        ).fetchone()
        closed = int(changed[0]) if changed else 0
        self.counts["channels"]["updated"] += closed
        return bool(closed)

    def take_turn(self, workspace_id: str, channel_id: str, now: datetime) -> None:
        """Record that the conversation's turn came (its `synced_at`), before it is read."""
        self.connection.execute(
            "update sync_channels set updated_at = $now where workspace_id = $w "
            "and channel_id = $c",
            {"w": workspace_id, "c": channel_id, "now": now},
        )

    def finish_pass(self, workspace_id: str, channel_id: str, now: datetime) -> None:
        """Close the pass: tombstone what history no longer returns; advance the checkpoint."""
        current = self.channel_pass(workspace_id, channel_id)
        assert current.oldest_ts is not None and current.latest_ts is not None
        keys = {"w": workspace_id, "c": channel_id}
        self.connection.begin()
        if not self._saw_unkeyed(workspace_id, channel_id, HISTORY):
            self._tombstone(
                "channel_id = $c and ts_us > $oldest and ts_us < $latest "
                "and (not is_thread_reply or is_thread_broadcast) "
                "and ts not in (select ts from sync_seen where workspace_id = $w "
                "and channel_id = $c and scope = 'history')",
                {
                    **keys,
                    "oldest": ts_to_us(current.oldest_ts),
                    "latest": ts_to_us(current.latest_ts),
                },
                now,
            )
        self.connection.execute(
            "update sync_channels set synced_through_ts = pass_latest_ts, pass_oldest_ts = null, "
            "pass_latest_ts = null, pass_cursor = null, pass_history_done = null, "
            "updated_at = $now where workspace_id = $w and channel_id = $c",
            {**keys, "now": now},
        )
        self.connection.execute(
            "delete from sync_seen where workspace_id = $w and channel_id = $c "
            "and scope = 'history'",
            keys,
        )
        crash_point("sync_before_pass_commit")
        self.connection.commit()

    def _saw_unkeyed(self, workspace_id: str, channel_id: str, scope: str) -> bool:
        """Whether a page of this read returned an entry without a usable ts (`UNKEYED`):
        then the read tombstones nothing."""
        return bool(
            self.connection.execute(
                "select count(*) from sync_seen where workspace_id = ? and channel_id = ? "
                "and scope = ? and ts = ?",
                [workspace_id, channel_id, scope, UNKEYED],
            ).fetchone()[0]
        )

    def _tombstone(self, condition: str, parameters: dict[str, Any], moment: datetime) -> None:
        """Mark matching live messages deleted (and the files only they shared)."""
        tombstoned = self.connection.execute(
            "update messages set is_deleted = true, latest_run_id = $run_id, "
            f"last_changed_at = $now where workspace_id = $w and not is_deleted and {condition}",
            {**parameters, "run_id": self.run_id, "now": moment},
        ).fetchone()
        self.counts["messages"]["tombstoned"] += int(tombstoned[0]) if tombstoned else 0
        self.connection.execute("delete from stage_files")
        self.counts["files"]["tombstoned"] += store.tombstone_files(
            self.connection, workspace_id=parameters["w"], run_id=self.run_id, now=moment
        )

    def record_run(
        self, *, workspace_id: str, source: str, started_at: datetime, summary: dict[str, Any]
    ) -> None:
        """The run's row in `import_runs` (source format `slack_api`), with its counts."""
        self.connection.execute(
            "insert into import_runs values ($run_id, $w, $source, 'slack_api', $started, "
            "$completed, 'succeeded', $counts, $warnings)",
            {
                "run_id": self.run_id,
                "w": workspace_id,
                "source": source,
                "started": started_at,
                "completed": datetime.now(UTC),
                "counts": orjson.dumps(summary).decode(),
                "warnings": orjson.dumps(self.warnings.items).decode(),
            },
        )
