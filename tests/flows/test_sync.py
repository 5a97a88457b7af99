"""The `sync` flows: task bodies with `.fn()`, retries, and sync + reconcile reaching search."""

import logging
import os
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from prefect.states import Completed, Failed

import flows.sync as sync_module
from flows.embed import Pace
from flows.sync import (
    logged_progress,
    retry_transient,
    sync_and_reconcile,
    sync_flow,
    sync_workspace,
)
from serving.engine import SearchEngine
from serving.models import SearchRequest
from slackquery.canonical import store
from slackquery.duckdb_setup import BusyDatabase
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from slackquery.slack.client import SlackApiError, SlackTransientError
from slackquery.slack.sync import CONVERSATION_TYPES, Progress, SyncRequest
from tests.slack.conftest import Live, live, sample_zip  # noqa: F401 (fixtures)
from tests.slack.server import Fault
from tests.slack.test_sync import change_workspace


def test_sync_task_syncs_and_skips_while_another_writer_runs(live: Live) -> None:  # noqa: F811
    synced = sync_workspace.fn(["public", "private"], [], None)
    assert synced["status"] == "synced" and synced["conversations"] > 0
    with store.writer_lock(live.settings):
        skipped = sync_workspace.fn(["public"], [], None)
    assert skipped["status"] == "skipped" and "already running" in skipped["reason"]


def test_a_sync_that_finds_the_store_open_in_another_process_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `project` holding canonical.duckdb past the writer's 30 s wait failed the flow.
    monkeypatch.setenv("SLACKQUERY_HOME", str(tmp_path / "home"))
    busy = "canonical store home/canonical.duckdb is busy: another process (PID 4242) has it open"

    def store_held_open(settings: Settings, request: SyncRequest, progress: Progress) -> None:
        raise BusyDatabase(busy, 4242)

    monkeypatch.setattr(sync_module, "sync", store_held_open)
    assert sync_workspace.fn(["public"], [], None) == {"status": "skipped", "reason": busy}


def test_only_transient_failures_are_retried() -> None:
    def state_of(error: Exception | None):
        return Completed() if error is None else Failed(data=error)

    assert retry_transient(None, None, state_of(SlackTransientError("x", "gave up")))  # type: ignore[arg-type]
    assert not retry_transient(None, None, state_of(SlackApiError("x", "token_revoked")))  # type: ignore[arg-type]
    assert not retry_transient(None, None, state_of(None))  # type: ignore[arg-type]


def test_a_sync_that_gave_up_on_an_ok_false_server_error_is_retried(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACKQUERY_SLACK_MAX_ATTEMPTS", "1")  # gives up at once: no backoff
    live.slack.faults.append(Fault("auth.test", "service_unavailable"))
    with pytest.raises(SlackTransientError) as raised:
        sync_workspace.fn(["im"], [], None)
    assert retry_transient(None, None, Failed(data=raised.value))  # type: ignore[arg-type]


def test_the_flows_pass_since_to_the_sync_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACKQUERY_HOME", str(tmp_path / "home"))
    requests: list[SyncRequest] = []

    def fake_sync(settings: Settings, request: SyncRequest, progress: Progress) -> dict[str, Any]:
        requests.append(request)
        return {
            "conversations": 0,
            "request_count": 0,
            "counts": {"messages": 0},
            "deferred": [],
            "revoked": [],
        }

    monkeypatch.setattr(sync_module, "sync", fake_sync)
    monkeypatch.setattr(sync_module, "reconcile", lambda **_options: {"status": "unchanged"})
    # As a deployment passes it: JSON, so an ISO day as a string.
    result = sync_and_reconcile(since="2024-01-01", max_minutes=10)  # type: ignore[arg-type]
    assert result["sync"]["status"] == "synced" and result["reconcile"]["status"] == "unchanged"
    sync_flow(since=date(2024, 2, 1))
    sync_and_reconcile()  # the deployment's default: no lower bound
    everything = tuple(CONVERSATION_TYPES)
    assert requests == [
        SyncRequest(types=everything, since=date(2024, 1, 1), max_minutes=10),
        SyncRequest(types=everything, since=date(2024, 2, 1)),
        SyncRequest(types=everything),
    ]


def _hits(engine: SearchEngine, text: str) -> list[str]:
    request = SearchRequest(query=text, mode="lexical", limit=50)
    return [hit.document_id for hit in engine.search(request).results]


def _reread_from_on_the_system_clock(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Move the re-read window `change_workspace` set on the fake clock to the system clock.

    The flow syncs on the system clock (a Prefect run cannot be handed a fake one), and the
    sample's messages lie in the past: a window of N days before the fake "now" is N days
    before a later real now, which would start after every changed message.
    """
    days = float(os.environ["SLACKQUERY_SLACK_REREAD_DAYS"])
    window_start = live.clock.now - days * 86_400
    monkeypatch.setenv("SLACKQUERY_SLACK_REREAD_DAYS", str((time.time() - window_start) / 86_400))


@pytest.mark.slow
def test_sync_and_reconcile_bring_edits_deletions_and_replies_to_search(
    live: Live,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = sync_and_reconcile()
    assert first["sync"]["status"] == "synced"
    assert first["reconcile"]["status"] == "published"
    changes, settings = change_workspace(live, monkeypatch)
    _reread_from_on_the_system_clock(live, monkeypatch)
    key = f"{first['sync']['workspace_id']}:{changes.channel}:"
    engine = SearchEngine(settings)
    try:
        assert (
            engine.get_message(key + changes.deleted).messages[0].document_id
            == key + changes.deleted
        )
        assert _hits(engine, "zebraquartz") == []
        assert _hits(engine, "flamingo") == []
        second = sync_and_reconcile()
        assert second["reconcile"]["status"] == "published"
        assert _hits(engine, "zebraquartz") == [key + changes.edited]
        assert _hits(engine, "flamingo") == [key + changes.reply]
        with pytest.raises(SlackqueryError, match="no message with document_id"):
            engine.get_message(key + changes.deleted)
    finally:
        engine.close()


def test_a_deployed_sync_logs_its_progress_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A paced sync ran for minutes with nothing in its log until it ended.
    now = [0.0]
    progress = logged_progress(logging.getLogger("sync-test"), Pace(lambda: now[0]))
    caplog.set_level(logging.INFO, logger="sync-test")
    for seconds, done in ((30.0, 1), (61.0, 2), (90.0, 3), (125.0, 4)):
        now[0] = seconds
        progress.update(done, 14, 600.0, done * 50)
    assert caplog.messages == [
        "synced 2 of 14 conversations (100 pages); at least 10 min left at this pace",
        "synced 4 of 14 conversations (200 pages); at least 10 min left at this pace",
    ]
