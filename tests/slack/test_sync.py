"""`sync` against the loopback Slack Web API: same rows as an import, resumable, incremental."""

import signal
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from slackquery.canonical.importer import import_source
from slackquery.commands.sync import render
from slackquery.errors import SlackqueryError
from slackquery.sample.workspace import TEAM_DOMAIN, TEAM_NAME
from slackquery.settings import Settings, get_settings
from slackquery.slack.client import SlackApiError
from slackquery.slack.pacing import SystemClock, pacing_from_setting
from slackquery.slack.sync import Progress, SyncRequest, sync
from tests.canonical.conftest import query
from tests.crashing import run_cli_until
from tests.loopback import serve
from tests.slack.conftest import PAGE_SIZE, Live
from tests.slack.server import TOKEN, FakeSlack, Fault

# Run bookkeeping differs between any two runs; the API's conversation objects carry
# flags (is_channel, is_private, ...) that an export's lists lack, so their raw payload does.
IGNORED = {"latest_run_id", "first_seen_run_id", "last_changed_at"}
IGNORED_CHANNEL = IGNORED | {"raw_json", "payload_hash"}


def rows(db: Path, table: str) -> list[tuple[Any, ...]]:
    """Every row of `table` without run bookkeeping, sorted."""
    ignored = IGNORED_CHANNEL if table == "channels" else IGNORED
    with duckdb.connect(str(db), read_only=True) as connection:
        columns = [
            row[0]
            for row in connection.execute(f"describe {table}").fetchall()
            if row[0] not in ignored
        ]
        return connection.execute(
            f"select {', '.join(columns)} from {table} order by all"
        ).fetchall()


def history_pages(live: Live) -> Counter[tuple[str, ...]]:
    return Counter(
        entry.page_key()
        for entry in live.slack.log
        if entry.method in ("conversations.history", "conversations.replies")
    )


def test_full_sync_equals_importing_the_export(
    live: Live, sample_zip: Path, tmp_path: Path
) -> None:
    report = sync(live.settings, clock=live.clock)
    assert report["skipped"] == [] and report["warning_count"] == 0
    imported = Settings(home=tmp_path / "imported")
    import_source(imported, sample_zip)
    for table in ("messages", "users", "channels", "files"):
        assert rows(live.settings.canonical_path, table) == rows(imported.canonical_path, table), (
            table
        )
    assert report["counts"]["messages"]["inserted"] == len(
        rows(imported.canonical_path, "messages")
    )


def test_progress_is_reported_after_every_page(live: Live) -> None:
    # Reported per conversation only, a big channel showed nothing for hours.
    seen: list[tuple[int, int, float, int]] = []
    report = sync(
        live.settings, clock=live.clock, progress=Progress(lambda *update: seen.append(update))
    )
    pages = [update[3] for update in seen]
    assert pages == sorted(pages) and pages[-1] > report["conversations"] + 1
    assert len(seen) > pages[-1]  # one update after each page, one before each conversation
    assert seen[-1][:2] == (report["conversations"], report["conversations"])


def window_start_s(live: Live) -> float:
    return live.clock.now - live.settings.slack_reread_days * 86_400


def test_second_sync_with_nothing_new_makes_only_the_reread_requests(live: Live) -> None:
    sync(live.settings, clock=live.clock)
    first_requests = len(live.slack.log)
    again = sync(live.settings, clock=live.clock)
    second = live.slack.log[first_requests:]
    changed = {kind: n for table in again["counts"].values() for kind, n in table.items() if n}
    assert set(changed) == {"unchanged"}
    start_us = int(window_start_s(live) * 1_000_000)
    expected_history = 0
    expected_threads = set()
    for channel, messages in live.slack.messages.items():
        in_window = [
            message
            for ts, message in messages.items()
            if int(float(ts) * 1_000_000) > start_us
            and (
                message.get("thread_ts") in (None, ts)
                or message.get("subtype") == "thread_broadcast"
            )
        ]
        expected_history += max(1, -(-len(in_window) // PAGE_SIZE))
        expected_threads |= {
            (channel, ts)
            for ts, message in messages.items()
            if message.get("reply_count") and float(message["latest_reply"]) * 1e6 >= start_us
        }
    history = [entry for entry in second if entry.method == "conversations.history"]
    # ... and the sweep of older history: a page below the window of each conversation.
    swept = [entry for entry in history if "oldest" not in entry.params]
    history = [entry for entry in history if entry not in swept]
    replies = {
        (entry.params["channel"], entry.params["ts"])
        for entry in second
        if entry.method == "conversations.replies"
    }
    assert len(history) == expected_history
    assert all(float(entry.params["oldest"]) >= window_start_s(live) - 1e-6 for entry in history)
    assert sorted(entry.params["channel"] for entry in swept) == sorted(live.slack.messages)
    assert all(float(entry.params["latest"]) <= window_start_s(live) + 1e-6 for entry in swept)
    assert replies == expected_threads and expected_threads
    assert len(history) < again["request_count"] < first_requests


def _old_active_thread(slack: FakeSlack) -> tuple[str, str, float, float]:
    """(channel, thread_ts, parent s, latest reply s) of the thread whose replies span longest."""
    return max(
        (
            (channel, ts, float(ts), float(message["latest_reply"]))
            for channel, messages in slack.messages.items()
            for ts, message in messages.items()
            if message.get("reply_count") and message.get("subtype") is None
        ),
        key=lambda item: item[3] - item[2],
    )


def _top_level(slack: FakeSlack, channel: str, after_s: float, skip: set[str]) -> str:
    return next(
        ts
        for ts, message in sorted(slack.messages[channel].items(), reverse=True)
        if float(ts) > after_s
        and "thread_ts" not in message
        and message.get("subtype") is None
        and ts not in skip
    )


@dataclass
class Changes:
    """What `change_workspace` did, for the assertions."""

    channel: str
    edited: str
    deleted: str
    thread: str
    reply: str
    joined: str
    renamed: str
    archived: str


def change_workspace(live: Live, monkeypatch: pytest.MonkeyPatch) -> tuple[Changes, Settings]:
    """Edit, delete, reply to an old thread, change membership, rename and archive.

    The re-read window is set to start between the thread's parent and its last reply, so
    the parent lies before the window and only "recently active thread" finds the reply.
    """
    slack = live.slack
    channel, thread_ts, parent_s, latest_s = _old_active_thread(slack)
    window_start = (parent_s + latest_s) / 2
    monkeypatch.setenv(
        "SLACKQUERY_SLACK_REREAD_DAYS", str((live.clock.now - window_start) / 86_400)
    )
    edited = _top_level(slack, channel, window_start, set())
    deleted = _top_level(slack, channel, window_start, {edited})
    slack.edit(channel, edited, "zebraquartz rollout notes, edited", f"{live.clock.now - 30:.6f}")
    slack.delete(channel, deleted)
    reply = f"{live.clock.now - 10:.6f}"
    slack.reply(channel, thread_ts, reply, slack.members[channel][0], "late answer: flamingo")
    outsider = next(u["id"] for u in slack.users if u["id"] not in slack.members[channel])
    slack.members[channel].append(outsider)
    others = [
        cid for cid, c in slack.conversations.items() if c.get("is_channel") and cid != channel
    ]
    slack.conversations[others[0]]["name"] = "renamed-by-test"
    slack.conversations[others[1]]["is_archived"] = True
    changes = Changes(channel, edited, deleted, thread_ts, reply, outsider, others[0], others[1])
    return changes, get_settings()


def test_edits_deletions_replies_and_membership_reach_the_store(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(live.settings, clock=live.clock)
    changes, settings = change_workspace(live, monkeypatch)
    report = sync(settings, clock=live.clock)
    assert report["counts"]["messages"]["inserted"] == 1
    assert report["counts"]["messages"]["tombstoned"] == 1
    db = settings.canonical_path
    by_ts = {
        row[0]: row[1:]
        for row in query(
            db,
            "select ts, text, is_edited, is_deleted, reply_count from messages "
            "where channel_id = ?",
            [changes.channel],
        )
    }
    assert by_ts[changes.edited][:3] == ("zebraquartz rollout notes, edited", True, False)
    assert by_ts[changes.deleted][2] is True
    assert by_ts[changes.reply][:3] == ("late answer: flamingo", False, False)
    assert (
        by_ts[changes.thread][3]
        == live.slack.messages[changes.channel][changes.thread]["reply_count"]
    )
    channels = {
        row[0]: row[1:]
        for row in query(db, "select channel_id, name, is_archived, member_ids from channels")
    }
    assert changes.joined in channels[changes.channel][2]
    assert channels[changes.renamed][0] == "renamed-by-test"
    assert channels[changes.archived][1] is True


def test_sigkill_during_sync_then_resume_equals_an_uninterrupted_sync(
    sample_zip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SystemClock()
    slack = FakeSlack.from_export(sample_zip, clock, team_name=TEAM_NAME, domain=TEAM_DOMAIN)
    with serve(slack.app) as url:
        env = {
            "SLACKQUERY_SLACK_TOKEN": TOKEN,
            "SLACKQUERY_SLACK_API_URL": f"{url}/api",
            "SLACKQUERY_SLACK_REQUESTS_PER_MINUTE": "0",
            "SLACKQUERY_SLACK_PAGE_SIZE": str(PAGE_SIZE),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        interrupted = {**env, "SLACKQUERY_HOME": str(tmp_path / "interrupted")}
        assert run_cli_until("sync_before_page_commit_12", interrupted, "sync") == -signal.SIGKILL
        crashed = len(slack.log)
        monkeypatch.setenv("SLACKQUERY_HOME", interrupted["SLACKQUERY_HOME"])
        resumed = get_settings()
        sync(resumed)
        pages = Counter(
            entry.page_key()
            for entry in slack.log
            if entry.method in ("conversations.history", "conversations.replies")
        )
        twice = [key for key, count in pages.items() if count > 1]
        assert len(twice) == 1, twice
        in_flight = [
            entry.page_key()
            for entry in slack.log[:crashed]
            if entry.method in ("conversations.history", "conversations.replies")
        ][-1]
        assert twice == [in_flight]
        monkeypatch.setenv("SLACKQUERY_HOME", str(tmp_path / "uninterrupted"))
        clean = get_settings()
        sync(clean)
    for table in ("messages", "users", "channels", "files"):
        assert rows(resumed.canonical_path, table) == rows(clean.canonical_path, table), table


def test_a_broadcast_read_before_its_parent_does_not_hide_the_thread(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One message a page: history (newest first) returns a broadcast reply pages before its
    # parent, so the store already holds the thread's latest reply when the parent comes.
    slack = live.slack
    channel, thread_ts, broadcast = min(
        (
            (cid, message["thread_ts"], ts)
            for cid, messages in slack.messages.items()
            for ts, message in messages.items()
            if message.get("subtype") == "thread_broadcast"
        ),
        key=lambda found: len(slack.messages[found[0]]),
    )
    messages = slack.messages[channel]
    later = [
        ts
        for ts, m in messages.items()
        if m.get("thread_ts") == thread_ts and float(ts) > float(broadcast)
    ]
    for ts in later:
        del messages[ts]
    messages[thread_ts]["latest_reply"] = broadcast
    messages[thread_ts]["reply_count"] -= len(later)
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="1")
    sync(settings, SyncRequest(channels=(channel,)), clock=live.clock)
    stored = query(
        settings.canonical_path,
        "select ts from messages where channel_id = ? and not is_deleted order by ts",
        [channel],
    )
    assert [row[0] for row in stored] == sorted(messages)


def _with_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return get_settings()


SUPPORT = "C0SQSUP06"  # its threads run to the re-read window
GENERAL = "C0SQGEN01"  # three messages in the re-read window
OPS_LEGACY = "C0SQOLD09"  # four messages, no thread


def live_ts(db: Path, channel: str) -> list[str]:
    return [
        row[0]
        for row in query(
            db,
            "select ts from messages where channel_id = ? and not is_deleted order by ts",
            [channel],
        )
    ]


def _longest_active_thread(live: Live, channel: str) -> str:
    """The thread of `channel` with the most replies among those active in the window."""
    return max(
        (
            ts
            for ts, message in live.slack.messages[channel].items()
            if message.get("reply_count") and float(message["latest_reply"]) >= window_start_s(live)
        ),
        key=lambda ts: live.slack.messages[channel][ts]["reply_count"],
    )


def test_replies_of_a_thread_slack_no_longer_has_are_tombstoned(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="2")
    request = SyncRequest(channels=(SUPPORT,))
    sync(settings, request, clock=live.clock)
    slack = live.slack
    thread_ts = _longest_active_thread(live, SUPPORT)
    replies = sorted(
        ts
        for ts, m in slack.messages[SUPPORT].items()
        if m.get("thread_ts") == thread_ts and ts != thread_ts
    )
    assert len(replies) > 2  # so the thread vanishes after its first page was read

    def delete_the_thread() -> None:
        for ts in [thread_ts, *replies]:
            del slack.messages[SUPPORT][ts]

    slack.faults.append(
        Fault(
            "conversations.replies", "changed", thread=thread_ts, after=1, change=delete_the_thread
        )
    )
    live.clock.now += 60
    report = sync(settings, request, clock=live.clock)
    # The parent lies before the re-read window: no history page could show it gone.
    assert float(thread_ts) < window_start_s(live)
    assert not {thread_ts, *replies} & set(live_ts(settings.canonical_path, SUPPORT))
    assert report["counts"]["messages"]["tombstoned"] == 1 + len(replies)
    assert query(settings.canonical_path, "select count(*) from sync_threads") == [(0,)]


def _quiet_threads(live: Live, channel: str) -> list[str]:
    """`channel`'s threads whose last reply lies before the re-read window and within the
    sweep's days, in the order the sweep reads threads read at one time: latest reply first."""
    settings = live.settings
    since = live.clock.now - settings.slack_thread_sweep_days * 86_400
    latest = {
        ts: float(message["latest_reply"])
        for ts, message in live.slack.messages[channel].items()
        if message.get("reply_count")
    }
    quiet = [ts for ts, last in latest.items() if since <= last < window_start_s(live)]
    return sorted(quiet, key=lambda ts: latest[ts], reverse=True)


def test_the_sweep_finds_a_late_reply_to_a_quiet_thread_in_turn(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 8: the history sweep's page of older messages then ends before the parent
    # of the thread that gets the late reply, which only the thread sweep may find.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="8")
    request = SyncRequest(channels=(SUPPORT,))
    sync(settings, request, clock=live.clock)
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_THREAD_SWEEP_PER_RUN="1")
    live.clock.now += 86_460  # the first sync read every thread: a day later all may be swept
    quiet = _quiet_threads(live, SUPPORT)
    assert len(quiet) >= 2
    late = f"{live.clock.now - 10:.6f}"
    live.slack.reply(SUPPORT, quiet[-1], late, live.slack.members[SUPPORT][0], "late: okapi")
    for turn, thread_ts in enumerate(quiet):
        before = len(live.slack.log)
        report = sync(settings, request, clock=live.clock)
        read = live.slack.requested("conversations.replies", "ts", before)
        assert report["swept_threads"] == 1 and thread_ts in read, turn
        assert "  quiet threads queued to re-read: 1" in render(report).splitlines()
        assert not set(quiet[turn + 1 :]) & set(read), turn
        found = late in live_ts(settings.canonical_path, SUPPORT)
        assert found == (thread_ts == quiet[-1]), turn
    assert report["counts"]["messages"]["inserted"] == 1
    before = len(live.slack.log)
    report = sync(settings, request, clock=live.clock)
    assert report["swept_threads"] == 0, "each was read within the day"
    still_quiet = set(quiet[:-1])  # the late reply made the last one active
    assert not still_quiet & set(live.slack.requested("conversations.replies", "ts", before))


def test_the_sweep_is_off_at_zero_days(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    request = SyncRequest(channels=(SUPPORT,))
    sync(live.settings, request, clock=live.clock)
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_THREAD_SWEEP_DAYS="0")
    live.clock.now += 86_460
    assert _quiet_threads(live, SUPPORT)
    before = len(live.slack.log)
    report = sync(settings, request, clock=live.clock)
    assert report["swept_threads"] == 0
    assert not set(_quiet_threads(live, SUPPORT)) & set(
        live.slack.requested("conversations.replies", "ts", before)
    )


def _older_top_level(live: Live, channel: str) -> list[str]:
    """`channel`'s messages in its history (top-level and broadcasts) before the re-read
    window, newest first."""
    return sorted(
        (
            ts
            for ts, message in live.slack.messages[channel].items()
            if float(ts) < window_start_s(live)
            and (
                message.get("thread_ts") in (None, ts)
                or message.get("subtype") == "thread_broadcast"
            )
        ),
        key=float,
        reverse=True,
    )


def _sweep_pages(live: Live, since: int) -> list[Any]:
    """The history sweep's requests logged from the `since`-th on: history with no lower
    bound (a pass always has one)."""
    return [
        entry
        for entry in live.slack.log[since:]
        if entry.method == "conversations.history" and "oldest" not in entry.params
    ]


def test_the_history_sweep_finds_old_edits_and_deletions_a_page_at_a_time(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = 3
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE=str(page))
    request = SyncRequest(channels=(SUPPORT,))
    sync(settings, request, clock=live.clock)
    live.clock.now += 3600
    older = _older_top_level(live, SUPPORT)
    # One message edited on the second page, one deleted further back; the three oldest
    # hidden, as a free workspace hides old history: Slack returns them no more.
    edited, hidden = older[page + 1], older[-3:]
    deleted = next(
        ts
        for ts in older[2 * page : -4]
        if not {"reply_count", "subtype"} & set(live.slack.messages[SUPPORT][ts])
    )
    live.slack.edit(SUPPORT, edited, "old note, edited: wombat", f"{live.clock.now:.6f}")
    live.slack.delete(SUPPORT, deleted)
    for ts in hidden:
        del live.slack.messages[SUPPORT][ts]
    visible = [ts for ts in older[:-3] if ts != deleted]
    pages = -(-len(visible) // page)
    deleted_on = sum(float(ts) > float(deleted) for ts in visible) // page
    assert 2 <= deleted_on < pages
    ends = []
    for turn in range(pages + 1):
        before = len(live.slack.log)
        report = sync(settings, request, clock=live.clock)
        (swept,) = _sweep_pages(live, before)
        assert report["swept_history"] == 1
        ends.append(swept.params["latest"])
        stored = query(
            settings.canonical_path,
            "select ts, text, is_deleted from messages where channel_id = ? and ts in (?, ?)",
            [SUPPORT, edited, deleted],
        )
        by_ts = {ts: (text, gone) for ts, text, gone in stored}
        assert (by_ts[edited][0] == "old note, edited: wombat") == (turn >= 1), turn
        assert by_ts[deleted][1] == (turn >= deleted_on), turn
    # Each page ends where the one before began; past the oldest, it starts again.
    assert ends[1:pages] == visible[page - 1 :: page][: pages - 1]
    assert float(older[0]) < float(ends[0]) <= float(ends[-1])
    assert set(hidden) <= set(live_ts(settings.canonical_path, SUPPORT))
    assert "  pages of older history re-read: 1" in render(report).splitlines()


def test_the_history_sweep_takes_the_least_recently_swept_first(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(live.settings, clock=live.clock)
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_HISTORY_SWEEP_PER_RUN="5")
    runs = []
    for _ in range(3):  # 14 conversations, 5 a run
        live.clock.now += 60
        before = len(live.slack.log)
        assert sync(settings, clock=live.clock)["swept_history"] == 5
        runs.append({entry.params["channel"] for entry in _sweep_pages(live, before)})
    assert not runs[0] & runs[1] and len(runs[0] | runs[1]) == 10
    assert runs[0] | runs[1] | runs[2] == set(live.slack.conversations)
    assert len(runs[2] & runs[0]) == 1, "the remaining four, then the least recently swept"
    off = _with_env(monkeypatch, SLACKQUERY_SLACK_HISTORY_SWEEP_PER_RUN="0")
    before = len(live.slack.log)
    assert sync(off, clock=live.clock)["swept_history"] == 0
    assert not _sweep_pages(live, before)


def test_a_conversation_its_pass_reads_whole_still_takes_its_sweep_turn(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With --since past its sweep point there is nothing older to read there: it kept the
    # first turn of every run, and no other conversation was ever swept.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_HISTORY_SWEEP_PER_RUN="1")
    sync(settings, clock=live.clock)
    since = datetime.fromtimestamp(live.clock.now, UTC).date()  # after every message
    turns = []
    for _ in range(3):
        live.clock.now += 60
        sync(settings, SyncRequest(since=since), clock=live.clock)
        last = "select channel_id from sync_history_sweeps order by swept_at desc limit 1"
        turns.append(query(settings.canonical_path, last)[0][0])
    assert len(set(turns)) == 3


def test_runs_cut_short_by_max_minutes_take_every_conversation_in_turn(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(live.settings, clock=live.clock)
    # A minute per history page: four minutes cannot reach every conversation.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_REQUESTS_PER_MINUTE="non-marketplace")
    request = SyncRequest(max_minutes=4)
    live.clock.now += 3600
    started = live.clock.now
    first = sync(settings, request, clock=live.clock)
    deferred = first["deferred"]
    assert deferred and first["conversations"] >= 1
    assert first["conversations"] + len(deferred) == len(live.slack.conversations)
    assert "  deferred to the next run (--max-minutes): " in render(first)
    before, ended = len(live.slack.log), live.clock.now
    assert ended - started >= 4 * 60
    # The conversation the run was in when time ran out is left between two pages.
    cut_short = open_passes(settings.canonical_path)
    assert cut_short == deferred[: len(cut_short)]
    not_started = deferred[len(cut_short) :]
    second = sync(settings, request, clock=live.clock)
    read = list(dict.fromkeys(live.slack.requested("conversations.history", "channel", before)))
    # The conversations the first run did not start come first, in the order it left them.
    reached = min(len(read), len(not_started))
    assert read[:reached] == not_started[:reached]
    left_in = [channel for channel in read if channel in second["deferred"]]
    assert second["conversations"] == len(read) - len(left_in) < len(not_started)
    # ... and those it read wait behind the rest, the one it was cut short in last.
    later = [channel for channel in second["deferred"] if channel not in left_in]
    assert later[: len(not_started) - reached] == not_started[reached:]
    assert later[len(later) - len(cut_short) :] == cut_short


def open_passes(db: Path) -> list[str]:
    """The conversations whose pass is open (begun, not finished)."""
    rows = query(db, "select channel_id from sync_channels where pass_latest_ts is not null")
    return [row[0] for row in rows]


def _endless_empty_pages(live: Live, monkeypatch: pytest.MonkeyPatch, channel: str) -> None:
    """`channel`'s history pages say has_more with a new cursor, empty, 1,000 times."""
    answer = live.slack._conversations_history
    pages = iter(range(1, 1001))

    def endless(params: dict[str, str]) -> dict[str, Any]:
        if params.get("channel") != channel:
            return answer(params)
        page = next(pages, None)
        more = {"next_cursor": f"empty-{page}"} if page else {}
        return {"ok": True, "messages": [], "has_more": bool(page), "response_metadata": more}

    monkeypatch.setattr(live.slack, "_conversations_history", endless)


def test_max_minutes_ends_a_long_conversation_between_pages_and_it_goes_on_at_its_turn(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A conversation's read ran to its end, however long: its run never stopped.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_REQUESTS_PER_MINUTE="60")
    _endless_empty_pages(live, monkeypatch, SUPPORT)
    request = SyncRequest(channels=(SUPPORT, GENERAL), max_minutes=0.5)
    first = sync(settings, request, clock=live.clock)
    assert first["conversations"] == 1 and first["deferred"] == [SUPPORT]
    pages = [c for c in live.slack.requested("conversations.history", "channel") if c == SUPPORT]
    assert 10 <= len(pages) <= 30  # a page a second for what is left of half a minute
    assert open_passes(settings.canonical_path) == [SUPPORT]
    saved = query(
        settings.canonical_path,
        "select pass_cursor from sync_channels where channel_id = ?",
        [SUPPORT],
    )[0][0]
    assert saved == f"empty-{len(pages)}"

    before = len(live.slack.log)
    second = sync(settings, request, clock=live.clock)
    # GENERAL's turn came before SUPPORT's; SUPPORT goes on from its checkpoint.
    assert live.slack.requested("conversations.history", "channel", before)[0] == GENERAL
    resumed = [
        entry
        for entry in live.slack.log[before:]
        if entry.method == "conversations.history" and entry.params["channel"] == SUPPORT
    ]
    assert resumed[0].params["cursor"] == saved
    assert second["conversations"] == 1 and second["deferred"] == [SUPPORT]


def test_an_error_of_one_conversation_skips_it_and_the_others_are_read(live: Live) -> None:
    # `ekm_access_denied` stopped every run, and the channel's open pass went first in the
    # next, so no other conversation was read again.
    live.slack.faults.append(
        Fault("conversations.history", "ekm_access_denied", channel=SUPPORT, times=2)
    )
    for _ in range(2):
        report = sync(live.settings, clock=live.clock)
        assert report["skipped"] == [{"channel_id": SUPPORT, "error": "ekm_access_denied"}]
        assert report["conversations"] == len(live.slack.conversations) - 1
        assert any(
            item["file"] == f"slack:{SUPPORT}" and "ekm_access_denied" in item["problem"]
            for item in report["warnings"]
        )
        live.clock.now += 60
    assert open_passes(live.settings.canonical_path) == [SUPPORT]
    healed = sync(live.settings, clock=live.clock)
    assert healed["skipped"] == [] and open_passes(live.settings.canonical_path) == []
    assert live_ts(live.settings.canonical_path, SUPPORT) == sorted(live.slack.messages[SUPPORT])


@pytest.mark.parametrize("error", ["invalid_auth", "invalid_arguments"])
def test_an_error_about_the_token_or_the_request_still_stops_the_run(
    live: Live, error: str
) -> None:
    live.slack.faults.append(Fault("conversations.history", error, channel=SUPPORT))
    with pytest.raises(SlackApiError, match=rf"^Slack conversations.history: {error}"):
        sync(live.settings, clock=live.clock)


def test_a_conversation_that_stops_every_run_is_read_after_the_others(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page that cannot be trusted stops the run; its pass, left open, went first in every
    # later run, so no other conversation was read again.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_REQUESTS_PER_MINUTE="6000")  # time moves
    sync(settings, clock=live.clock)
    broken = {"ok": True, "messages": "oops", "has_more": False}
    for run in range(3):
        live.clock.now += 3600
        live.slack.faults.append(
            Fault("conversations.history", "body", channel=SUPPORT, body=broken)
        )
        before = len(live.slack.log)
        with pytest.raises(SlackApiError, match="malformed page"):
            sync(settings, clock=live.clock)
        read = list(dict.fromkeys(live.slack.requested("conversations.history", "channel", before)))
        if run:  # every other conversation is read before it
            assert len(read) == len(live.slack.conversations) and read[-1] == SUPPORT
    assert open_passes(settings.canonical_path) == [SUPPORT]


@pytest.mark.parametrize(
    ("preset", "wanted", "size"),
    [
        ("tiers", 50, 50),
        ("tiers", 80, 50),
        ("non-marketplace", 50, 1),
        ("0", 80, 80),
        ("0.5", 50, 1),
        ("tiers", 0, 0),
    ],
)
def test_the_sweep_reads_at_most_a_minute_of_replies(preset: str, wanted: int, size: int) -> None:
    assert pacing_from_setting(preset).calls_in_a_minute("conversations.replies", wanted) == size


@pytest.mark.parametrize(
    "page",
    [
        {"ok": True, "messages": [], "has_more": True, "response_metadata": {"next_cursor": ""}},
        {"ok": True, "messages": "oops", "has_more": False},
    ],
    ids=["has_more-without-cursor", "messages-not-a-list"],
)
def test_a_history_page_that_is_not_whole_stops_the_run_before_any_tombstone(
    live: Live, monkeypatch: pytest.MonkeyPatch, page: dict[str, Any]
) -> None:
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="1")
    request = SyncRequest(channels=(GENERAL,))
    sync(settings, request, clock=live.clock)
    db = settings.canonical_path
    before = live_ts(db, GENERAL)
    live.clock.now += 60
    live.slack.faults.append(
        Fault("conversations.history", "body", channel=GENERAL, after=1, body=page)
    )
    asked = len(live.slack.log)
    with pytest.raises(SlackApiError, match=r"^Slack conversations.history: malformed page \("):
        sync(settings, request, clock=live.clock)
    assert live_ts(db, GENERAL) == before
    history = [e for e in live.slack.log[asked:] if e.method == "conversations.history"]
    good_page_cursor = history[1].params["cursor"]
    assert query(db, "select pass_cursor from sync_channels") == [(good_page_cursor,)]
    asked = len(live.slack.log)
    resumed = sync(settings, request, clock=live.clock)
    assert resumed["counts"]["messages"]["tombstoned"] == 0 and live_ts(db, GENERAL) == before
    first = next(e for e in live.slack.log[asked:] if e.method == "conversations.history")
    assert first.params["cursor"] == good_page_cursor


@pytest.mark.parametrize(
    "entry", [{"ts": 1710432151.387, "text": "a number"}, "not an object"], ids=["ts", "entry"]
)
def test_an_entry_without_a_usable_ts_keeps_its_read_from_tombstoning(
    live: Live, monkeypatch: pytest.MonkeyPatch, entry: Any
) -> None:
    # Which stored message it was cannot be told: its copy was tombstoned as deleted.
    request = SyncRequest(channels=(GENERAL,))
    sync(live.settings, request, clock=live.clock)
    db = live.settings.canonical_path
    before = live_ts(db, GENERAL)
    live.clock.now += 60
    page = {"ok": True, "messages": [entry], "has_more": False}
    live.slack.faults.append(Fault("conversations.history", "body", channel=GENERAL, body=page))
    report = sync(live.settings, request, clock=live.clock)
    assert report["counts"]["messages"]["tombstoned"] == 0 and report["warning_count"] == 1
    assert live_ts(db, GENERAL) == before


def test_a_thread_quiet_since_before_since_stays_as_imported(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a re-read window reaching past --since, a thread last active before it was
    # re-read, and a reply Slack no longer returns was tombstoned.
    sync(live.settings, clock=live.clock)
    replies = [
        (channel, ts, message["thread_ts"])
        for channel, messages in live.slack.messages.items()
        for ts, message in messages.items()
        if message.get("thread_ts") not in (None, ts)
    ]
    channel, reply, thread = min(replies, key=lambda item: float(item[1]))
    last = max(float(ts) for c, ts, t in replies if (c, t) == (channel, thread))
    since = datetime.fromtimestamp(last + 86_400, UTC).date()
    live.slack.delete(channel, reply)
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_REREAD_DAYS="1000")
    live.clock.now += 3600
    sync(settings, SyncRequest(since=since), clock=live.clock)
    assert reply in live_ts(settings.canonical_path, channel)


def test_a_sweep_page_marks_no_range_with_a_message_outside_its_bounds(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # History before --since stays as imported: a message from before it on the page made
    # the sweep tombstone everything from it up.
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="3")
    older = _older_top_level(live, SUPPORT)
    since = datetime.fromtimestamp(float(older[len(older) // 2]), UTC).date()
    since_ts = f"{datetime(since.year, since.month, since.day, tzinfo=UTC).timestamp():.6f}"
    request = SyncRequest(channels=(SUPPORT,), since=since)
    sync(settings, request, clock=live.clock)
    live.clock.now += 3600
    kept = live_ts(settings.canonical_path, SUPPORT)
    intruder = {"type": "message", "user": "U0SQ00001", "text": "before since", "ts": "1.000000"}
    answer = live.slack._conversations_history

    def with_intruder(params: dict[str, str]) -> dict[str, Any]:
        page = answer(params)
        if params.get("oldest") == since_ts and "latest" in params and "cursor" not in params:
            page["messages"].append(intruder)  # the sweep's page: below the pass's bound
        return page

    monkeypatch.setattr(live.slack, "_conversations_history", with_intruder)
    report = sync(settings, request, clock=live.clock)
    assert report["swept_history"] == 1 and report["counts"]["messages"]["tombstoned"] == 0
    assert set(kept) <= set(live_ts(settings.canonical_path, SUPPORT))


@pytest.mark.parametrize("method", ["conversations.history", "conversations.replies"])
def test_a_cursor_that_repeats_is_an_error_not_a_loop(live: Live, method: str) -> None:
    page = {
        "ok": True,
        "messages": [],
        "has_more": True,
        "response_metadata": {"next_cursor": "bm90IGFnYWlu"},
    }
    # Three answers: without the check, the fourth request reaches the real server.
    live.slack.faults.append(Fault(method, "body", channel=SUPPORT, times=3, body=page))
    with pytest.raises(SlackApiError, match=rf"^Slack {method}: cursor loop \(") as error:
        sync(live.settings, SyncRequest(channels=(SUPPORT,)), clock=live.clock)
    assert f"slack:{SUPPORT}" in str(error.value)  # whose read it was


def _stop_after_first_page(live: Live, method: str) -> Fault:
    """A token revoked after the first page of a read: the checkpoint points at the second."""
    if method == "conversations.history":
        return Fault(method, "token_revoked", channel=SUPPORT, after=1)
    thread = max(
        live.slack.messages[SUPPORT],
        key=lambda ts: live.slack.messages[SUPPORT][ts].get("reply_count") or 0,
    )
    return Fault(method, "token_revoked", channel=SUPPORT, thread=thread, after=1)


@pytest.mark.parametrize("method", ["conversations.history", "conversations.replies"])
def test_a_saved_cursor_slack_rejects_restarts_that_read_once(
    live: Live, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="2")
    request = SyncRequest(channels=(SUPPORT,))
    stop = _stop_after_first_page(live, method)
    live.slack.faults.append(stop)
    with pytest.raises(SlackApiError, match="token_revoked"):
        sync(settings, request, clock=live.clock)
    live.slack.faults.append(Fault(method, "invalid_cursor", channel=SUPPORT, thread=stop.thread))
    report = sync(settings, request, clock=live.clock)
    assert any("rejected the saved cursor" in item["problem"] for item in report["warnings"])
    assert live_ts(settings.canonical_path, SUPPORT) == sorted(live.slack.messages[SUPPORT])


def test_a_cursor_rejected_again_after_the_restart_is_an_error(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _with_env(monkeypatch, SLACKQUERY_SLACK_PAGE_SIZE="2")
    request = SyncRequest(channels=(SUPPORT,))
    live.slack.faults.append(_stop_after_first_page(live, "conversations.history"))
    with pytest.raises(SlackApiError, match="token_revoked"):
        sync(settings, request, clock=live.clock)
    live.slack.faults.append(
        Fault("conversations.history", "invalid_cursor", channel=SUPPORT, times=2)
    )
    with pytest.raises(SlackApiError, match=r"invalid_cursor \(again after restarting"):
        sync(settings, request, clock=live.clock)


FIRST = "1700000000.000100"
ODD = "1700000000.000200"


@pytest.mark.parametrize(
    ("odd", "problem"),
    [
        ({"ts": FIRST, "text": "second copy"}, f"duplicate message ts={FIRST} skipped"),
        ({"text": "lone \ud800 surrogate"}, f"message ts={ODD} is not storable as JSON"),
        ({"user": {"id": "U1"}}, f"message ts={ODD} has a user that is not a user id (dict)"),
        ({"reply_count": 10**30}, f"message ts={ODD} is not storable as JSON"),
        ({"reply_count": 2**40}, f"message ts={ODD} has a reply_count out of range"),
        ({"files": [{"id": "F1", "size": 2**63}]}, f"message ts={ODD} shares a file whose size"),
        ({"ts": "253402300800.000000"}, "ts=253402300800.000000 lies after the year 9999"),
        # A thread parent without a ts: `thread_ts == ts` held (None == None).
        (
            {"ts": None, "reply_count": 2, "latest_reply": FIRST},
            "message without a valid ts (None) skipped",
        ),
        (
            {"ts": 5, "thread_ts": 5, "reply_count": 2, "latest_reply": FIRST},
            "message without a valid ts (5) skipped",
        ),
    ],
    ids=[
        "same-ts",
        "lone-surrogate",
        "user-object",
        "beyond-64-bits",
        "beyond-32-bits",
        "file-size",
        "after-9999",
        "parent-without-ts",
        "parent-with-a-number-ts",
    ],
)
def test_an_odd_message_is_skipped_with_a_warning_naming_it(
    live: Live, odd: dict[str, Any], problem: str
) -> None:
    fine = {"type": "message", "ts": FIRST, "text": "first copy"}
    page = {"ok": True, "messages": [fine, {**fine, "ts": ODD, **odd}], "has_more": False}
    live.slack.faults.append(Fault("conversations.history", "body", channel=OPS_LEGACY, body=page))
    report = sync(live.settings, SyncRequest(channels=(OPS_LEGACY,)), clock=live.clock)
    assert any(problem in item["problem"] for item in report["warnings"]), report["warnings"]
    stored = query(
        live.settings.canonical_path,
        "select ts, text from messages where channel_id = ?",
        [OPS_LEGACY],
    )
    assert stored == [(FIRST, "first copy")]


def _rewritten(export: Path, path: Path, name: str, change: Callable[[Any], None]) -> Path:
    """A copy of `export` whose JSON member `name` went through `change` (in place)."""
    with zipfile.ZipFile(export) as source, zipfile.ZipFile(path, "w") as copy:
        for member in source.namelist():
            data = source.read(member)
            if member == name:
                value = orjson.loads(data)
                change(value)
                data = orjson.dumps(value)
            copy.writestr(member, data)
    return path


def _without_team_ids(export: Path, path: Path) -> Path:
    """A copy of `export` whose users.json names no team (no `team_id`, no `profile.team`)."""

    def drop_teams(users: list[dict[str, Any]]) -> None:
        for user in users:
            user.pop("team_id", None)
            user.get("profile", {}).pop("team", None)

    return _rewritten(export, path, "users.json", drop_teams)


def test_a_workspace_imported_without_a_team_id_is_not_synced_into_a_second_copy(
    live: Live, sample_zip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sync stored a second workspace with the same slug and the same channel ids.
    export = _without_team_ids(sample_zip, tmp_path / "ws_noteam.zip")
    import_source(live.settings, export, workspace_slug="fjordline")
    db = live.settings.canonical_path
    before = {table: rows(db, table) for table in ("workspaces", "channels", "messages")}
    with pytest.raises(SlackqueryError) as refused:
        sync(live.settings, clock=live.clock)
    message = str(refused.value)
    assert "\n" not in message
    assert "already holds Slack workspace T0SAMPLE1 as workspace 'fjordline'" in message
    assert "nothing was written" in message and "--workspace-slug fjordline" in message
    assert {table: rows(db, table) for table in before} == before
    assert query(db, "select count(*) from sync_channels") == [(0,)]
    # The advice works: a new store, a sync, then the export again into the synced workspace.
    settings = _with_env(monkeypatch, SLACKQUERY_CANONICAL_DB=str(tmp_path / "new.duckdb"))
    sync(settings, clock=live.clock)
    import_source(settings, export, workspace_slug="fjordline")
    assert query(settings.canonical_path, "select workspace_id from workspaces") == [("T0SAMPLE1",)]


def test_an_older_export_imported_after_a_sync_keeps_what_the_sync_read(
    live: Live, sample_zip: Path
) -> None:
    # Re-importing the export after a sync reopened what Slack had closed since: a public
    # channel made private, a member removed, an account deactivated came back as exported.
    sync(live.settings, clock=live.clock)
    slack = live.slack
    public = next(cid for cid, c in slack.conversations.items() if not c.get("is_private"))
    group = next(cid for cid, c in slack.conversations.items() if c.get("is_group"))
    removed = slack.members[group].pop()
    slack.conversations[public] |= {"is_channel": False, "is_group": True, "is_private": True}
    leaver = slack.users[0]["id"]
    slack.users[0] = {**slack.users[0], "deleted": True}
    live.clock.now += 3600
    sync(live.settings, clock=live.clock)
    db = live.settings.canonical_path

    def access() -> list[Any]:
        return [
            query(db, f"select conversation_type from channels where channel_id = '{public}'"),
            query(
                db,
                f"select list_contains(member_ids, '{removed}') from channels "
                f"where channel_id = '{group}'",
            ),
            query(db, f"select is_deleted from users where user_id = '{leaver}'"),
        ]

    synced = access()
    assert synced == [[("private_channel",)], [(False,)], [(True,)]]
    report = import_source(live.settings, sample_zip)  # its newest message predates both syncs
    assert access() == synced
    kept = [
        item["problem"] for item in report["warnings"] if "kept as a sync read" in item["problem"]
    ]
    # Every channel: the API's objects carry flags the export's lack (another payload).
    assert [problem.split(" (e.g.")[0] for problem in kept] == [
        f"{len(slack.conversations)} channel(s)",
        "1 user(s)",
    ]


def test_an_export_still_updates_a_channel_no_sync_has_read(
    live: Live, sample_zip: Path, tmp_path: Path
) -> None:
    # The stale rule looked at the whole workspace: after a `--types public` sync, an
    # export could no longer remove a member from a private channel only exports keep.
    import_source(live.settings, sample_zip)
    sync(live.settings, SyncRequest(types=("public",)), clock=live.clock)
    group = next(cid for cid, c in live.slack.conversations.items() if c.get("is_group"))
    removed = live.slack.members[group][-1]

    def remove_member(groups: list[dict[str, Any]]) -> None:
        for entry in groups:
            if entry["id"] == group:
                entry["members"].remove(removed)

    later = _rewritten(sample_zip, tmp_path / "later.zip", "groups.json", remove_member)
    import_source(live.settings, later)
    members = query(
        live.settings.canonical_path,
        "select member_ids from channels where channel_id = ?",
        [group],
    )
    assert removed not in members[0][0]


def test_a_workspace_of_another_team_that_shares_users_is_no_copy(live: Live) -> None:
    # An Enterprise Grid org's workspaces share users: a team id is no slug-keyed copy.
    sync(live.settings, clock=live.clock)
    db = live.settings.canonical_path
    with duckdb.connect(str(db)) as connection:
        connection.execute(
            "insert into workspaces select 'T0SIBLING', 'sibling', 'Sibling', "
            "'https://sibling.slack.com', source_format, latest_run_id, last_changed_at "
            "from workspaces"
        )
        connection.execute(
            "insert into users select * replace ('T0SIBLING' as workspace_id) from users"
        )
    live.clock.now += 60
    assert sync(live.settings, clock=live.clock)["workspace_id"] == "T0SAMPLE1"
