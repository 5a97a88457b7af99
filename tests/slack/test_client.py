"""Pacing, retries and error classification of the Web API client, against the loopback API.

The clock is fake: pacing, Retry-After and backoff advance it instead of sleeping, and the
server logs each request at the same clock's reading.
"""

import email.utils
import json
import re
import socket
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from slackquery.canonical import store
from slackquery.canonical.authors import Authors
from slackquery.canonical.importer import import_source
from slackquery.canonical.staging import Warnings
from slackquery.canonical.sync_store import SyncStore
from slackquery.cli import main
from slackquery.commands.sync import render
from slackquery.errors import SlackqueryError
from slackquery.settings import get_settings
from slackquery.slack.client import (
    MAX_EMPTY_PAGES,
    RETRY_AFTER_DEFAULT_S,
    RETRY_AFTER_MAX_S,
    CursorTrail,
    SlackApiError,
    SlackTransientError,
)
from slackquery.slack.pacing import pacing_from_setting
from slackquery.slack.sync import SyncRequest, sync
from tests.canonical.conftest import query
from tests.crashing import ROOT
from tests.slack.conftest import PAGE_SIZE, Live
from tests.slack.server import TOKEN, Fault


def _with(monkeypatch: pytest.MonkeyPatch, **env: str):
    for name, value in env.items():
        monkeypatch.setenv(f"SLACKQUERY_{name.upper()}", value)
    return get_settings()


@pytest.mark.parametrize("preset", ["tiers", "non-marketplace", "30"])
def test_pacing_is_never_exceeded(live: Live, monkeypatch: pytest.MonkeyPatch, preset: str) -> None:
    settings = _with(monkeypatch, slack_requests_per_minute=preset, slack_page_size="50")
    report = sync(settings, SyncRequest(types=("public",)), clock=live.clock)
    pacing = pacing_from_setting(preset)
    times: dict[str, list[float]] = defaultdict(list)
    for entry in live.slack.log:
        times[entry.method].append(entry.at)
    for method, moments in times.items():
        allowed = int(60 / pacing.interval(method))
        # Any `allowed + 1` consecutive calls span at least a minute: no 60 s window holds more.
        for first, last in zip(moments, moments[allowed:], strict=False):
            assert last - first >= 60 - 1e-6, (method, first, last)
    history = [e for e in live.slack.log if e.method == "conversations.history"]
    assert {int(e.params["limit"]) for e in history} == {pacing.page_size(history[0].method, 50)}
    assert report["rate_limit_wait_s"] > 0
    assert live.clock.slept  # waits went to the fake clock, not to real time


def test_retry_after_is_honoured_exactly(live: Live) -> None:
    live.slack.faults.append(Fault("conversations.history", "429", retry_after=7))
    report = sync(live.settings, clock=live.clock)
    history = [e for e in live.slack.log if e.method == "conversations.history"]
    assert history[1].page_key() == history[0].page_key()
    assert history[1].at - history[0].at == 7
    assert report["retries"]["conversations.history"] == 1
    assert report["rate_limit_wait_s"] == 7


def test_server_errors_back_off_with_capped_jitter(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _with(monkeypatch, slack_backoff_max_s="3")
    live.slack.faults.append(Fault("conversations.replies", "500", times=4))
    report = sync(settings, clock=live.clock)
    assert report["retries"]["conversations.replies"] == 4
    assert len(live.clock.slept) == 4
    caps = [1, 2, 3, 3]
    assert all(0 <= slept <= cap for slept, cap in zip(live.clock.slept, caps, strict=True))


def test_too_many_failures_stop_the_run(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _with(monkeypatch, slack_max_attempts="3")
    live.slack.faults.append(Fault("users.list", "500", times=3))
    with pytest.raises(SlackApiError, match=r"users.list: gave up \(3 attempts, last: HTTP 500\)"):
        sync(settings, clock=live.clock)


def test_an_endpoint_that_cannot_be_reached_is_named(
    live: Live, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/api/"
    settings = _with(monkeypatch, slack_api_url=url, slack_max_attempts="2")
    with pytest.raises(SlackTransientError, match=rf"last: ConnectError at {re.escape(url)}: "):
        sync(settings, clock=live.clock)
    # Each wait is said as it starts: the default attempts took ~50 s of silence.
    (warning,) = caplog.messages
    assert re.fullmatch(
        rf"[a-z.]+ failed \(ConnectError at {re.escape(url)}: .*\); attempt 2 of 2 in "
        r"[0-9.]+ s",
        warning,
    ), warning


def test_a_slow_response_times_out_and_is_retried(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _with(monkeypatch, slack_timeout_s="0.2")
    live.slack.faults.append(Fault("team.info", "slow", delay_s=1.0))
    report = sync(settings, SyncRequest(types=("im",)), clock=live.clock)
    assert report["retries"] == {"team.info": 1}
    assert report["requests"]["team.info"] == 2


def test_not_in_channel_skips_that_channel_with_a_warning(live: Live) -> None:
    channel = next(cid for cid, c in live.slack.conversations.items() if c.get("is_channel"))
    live.slack.not_member.add(channel)
    report = sync(live.settings, clock=live.clock)
    assert report["skipped"] == [{"channel_id": channel, "error": "not_in_channel"}]
    assert any(channel in item["file"] for item in report["warnings"])
    db = live.settings.canonical_path
    assert query(db, "select count(*) from messages where channel_id = ?", [channel]) == [(0,)]
    assert query(db, "select count(distinct channel_id) from messages")[0][0] > 3


@pytest.mark.parametrize(
    "body", ['{"ok": true, "messages": [{"ts": "17', "<html><body>502 Bad Gateway</body></html>"]
)
def test_a_200_that_is_not_json_is_retried(
    live: Live, monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    # One bad body (cut short, or a proxy's page) stopped the run at once.
    channel = "C0SQGEN01"
    live.slack.faults.append(Fault("conversations.history", "raw", channel=channel, body=body))
    report = sync(live.settings, SyncRequest(channels=(channel,)), clock=live.clock)
    assert report["retries"] == {"conversations.history": 1} and report["conversations"] == 1
    settings = _with(monkeypatch, slack_max_attempts="2")
    live.slack.faults.append(Fault("auth.test", "raw", times=2, body=body))
    with pytest.raises(SlackTransientError, match=r"gave up \(2 attempts, last: HTTP 200 \(not"):
        sync(settings, SyncRequest(channels=(channel,)), clock=live.clock)


def test_revoked_token_stops_the_run_and_the_next_run_resumes(live: Live) -> None:
    live.slack.faults.append(Fault("conversations.replies", "token_revoked"))
    with pytest.raises(SlackApiError, match=r"token_revoked.*SLACKQUERY_SLACK_TOKEN"):
        sync(live.settings, clock=live.clock)
    partial = query(live.settings.canonical_path, "select count(*) from messages")[0][0]
    assert partial > 0
    report = sync(live.settings, clock=live.clock)
    assert (
        report["counts"]["messages"]["inserted"] + partial
        == query(live.settings.canonical_path, "select count(*) from messages")[0][0]
    )


def test_missing_scope_names_the_scope(live: Live) -> None:
    live.slack.faults.append(Fault("conversations.history", "missing_scope"))
    with pytest.raises(SlackApiError, match="lacks the scope channels:history"):
        sync(live.settings, clock=live.clock)


def test_a_page_that_changes_between_two_requests(live: Live) -> None:
    slack = live.slack
    channel = max(slack.messages, key=lambda cid: len(slack.messages[cid]))
    newest = max(slack.messages[channel], key=float)

    def change() -> None:
        slack.edit(channel, newest, "changed while you asked", f"{live.clock.now:.6f}")

    slack.faults.append(Fault("conversations.history", "changed", channel=channel, change=change))
    sync(live.settings, clock=live.clock)
    assert query(
        live.settings.canonical_path, "select text from messages where ts = ?", [newest]
    ) == [("changed while you asked",)]


def test_a_stale_page_never_resurrects_a_tombstone(live: Live) -> None:
    sync(live.settings, clock=live.clock)
    slack = live.slack
    channel = max(slack.messages, key=lambda cid: len(slack.messages[cid]))
    ts, message = max(
        (item for item in slack.messages[channel].items() if "thread_ts" not in item[1]),
        key=lambda item: float(item[0]),
    )
    stale_page = [dict(message)]
    read_before_deletion = datetime.fromtimestamp(live.clock.now, UTC)
    live.clock.now += 60
    slack.delete(channel, ts)
    sync(live.settings, clock=live.clock)
    db = live.settings.canonical_path
    assert query(db, "select is_deleted from messages where ts = ?", [ts]) == [(True,)]
    writer = SyncStore(live.settings, "stale-run", Warnings())
    try:
        writer.begin_pass(
            "T0SAMPLE1",
            channel,
            oldest_ts="0",
            latest_ts=ts,
            active_since_us=0,
            now=read_before_deletion,
        )
        writer.write_page(
            "T0SAMPLE1",
            channel,
            stale_page,
            authors=Authors({}, Warnings()),
            scope="history",
            next_cursor="more",
            observed_at=read_before_deletion,
            where="stale",
        )
    finally:
        writer.close()
    assert query(db, "select is_deleted from messages where ts = ?", [ts]) == [(True,)]


def test_sync_and_import_share_one_writer_lock(live: Live, sample_zip) -> None:
    with store.writer_lock(live.settings):
        with pytest.raises(SlackqueryError, match="another import or sync is already running"):
            sync(live.settings, clock=live.clock)
        with pytest.raises(SlackqueryError, match="another import or sync is already running"):
            import_source(live.settings, sample_zip)


def test_the_token_is_never_printed_logged_or_stored(live: Live) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", "sync", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**__import__("os").environ, "SLACKQUERY_LOG_LEVEL": "DEBUG"},
    )
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout)["conversations"] > 0
    settings_listing = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", "settings", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert TOKEN not in process.stdout + process.stderr + settings_listing
    for path in live.settings.home.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_cli_without_a_token_says_how_to_set_one(
    home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("SLACKQUERY_SLACK_TOKEN", raising=False)
    assert main(["sync"]) == 1
    assert "set SLACKQUERY_SLACK_TOKEN" in capsys.readouterr().err


def test_cli_a_size_to_plan_for_without_plan_is_a_usage_error(
    home, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as refused:  # it started a real sync, the size ignored
        main(["sync", "--messages", "10"])
    assert refused.value.code == 2
    assert "--messages applies to --plan" in capsys.readouterr().err


def test_cli_plan_prints_every_preset_from_the_store_shape(
    live: Live, capsys: pytest.CaptureFixture
) -> None:
    sync(live.settings, clock=live.clock)
    assert main(["sync", "--plan", "--messages", "100000", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    by_name = {preset["preset"]: preset for preset in planned["presets"]}
    assert set(by_name) == {"tiers", "non-marketplace", "0 (unpaced)"}
    limited = by_name["non-marketplace"]
    assert limited["history_page_size"] == min(PAGE_SIZE, 15)
    # One request a minute each for history and replies: at least the larger count in minutes.
    requests = limited["requests"]
    assert limited["minutes_at_least"] == max(
        requests["conversations.history"], requests["conversations.replies"]
    )
    assert by_name["0 (unpaced)"]["minutes_at_most"] == 0
    # A later run: a history page of every conversation whatever changed, and the sweeps
    # (older history: a page of as many conversations as a minute allows; quiet threads).
    later = {name: preset["later_run"]["requests"] for name, preset in by_name.items()}
    conversations = len(live.slack.conversations)
    assert later["tiers"]["conversations.history"] == 2 * conversations
    assert later["0 (unpaced)"]["conversations.history"] == 2 * conversations
    assert later["non-marketplace"]["conversations.history"] == conversations + 1
    assert later["tiers"]["conversations.replies"] == live.settings.slack_thread_sweep_per_run
    assert later["non-marketplace"]["conversations.replies"] == 1
    assert by_name["non-marketplace"]["later_run"]["minutes_at_least"] == conversations + 1
    assert main(["sync", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "non-marketplace" in out
    assert f"each later run: at least {sum(later['tiers'].values())} requests" in out


@pytest.mark.parametrize(
    ("method", "page", "problem"),
    [
        ("users.list", {"ok": True, "members": "oops"}, "'members' is a str, not a list"),
        ("conversations.list", {"ok": True}, "'channels' is missing, not a list"),
        (
            "conversations.members",
            {"ok": True, "members": [], "has_more": True},
            "has_more is true but there is no next_cursor",
        ),
    ],
)
def test_a_list_page_that_is_not_whole_is_an_error(
    live: Live, method: str, page: dict, problem: str
) -> None:
    live.slack.faults.append(Fault(method, "body", body=page))
    with pytest.raises(SlackApiError, match=rf"^Slack {method}: malformed page \({problem}\)$"):
        sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)


@pytest.mark.parametrize(
    ("method", "key"),
    [
        ("users.list", "members"),
        ("conversations.list", "channels"),
        ("conversations.members", "members"),
    ],
)
def test_a_list_cursor_that_repeats_is_an_error_not_a_loop(
    live: Live, method: str, key: str
) -> None:
    page = {"ok": True, key: [], "response_metadata": {"next_cursor": "b2Zmc2V0OjA="}}
    # Three answers: without the check, the fourth request reaches the real server.
    live.slack.faults.append(Fault(method, "body", times=3, body=page))
    with pytest.raises(SlackApiError, match=rf"^Slack {method}: cursor loop \("):
        sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)


TRANSIENT = ["internal_error", "fatal_error", "service_unavailable", "request_timeout"]


@pytest.mark.parametrize("error", TRANSIENT)
def test_transient_errors_in_an_ok_false_body_back_off_and_retry(
    live: Live, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    settings = _with(monkeypatch, slack_max_attempts="3", slack_backoff_max_s="3")
    live.slack.faults.append(Fault("users.list", error, times=2))
    report = sync(settings, SyncRequest(types=("im",)), clock=live.clock)
    assert report["retries"] == {"users.list": 2} and len(live.clock.slept) == 2
    live.slack.faults.append(Fault("users.list", error, times=3))
    with pytest.raises(SlackTransientError, match=rf"gave up \(3 attempts, last: {error}\)"):
        sync(settings, SyncRequest(types=("im",)), clock=live.clock)


def test_ratelimited_in_an_ok_false_body_waits_its_retry_after(live: Live) -> None:
    live.slack.faults.append(Fault("team.info", "ratelimited", retry_after=5))
    report = sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    first, second = (e.at for e in live.slack.log if e.method == "team.info")
    assert second - first == 5
    assert report["retries"] == {"team.info": 1} and report["rate_limit_wait_s"] == 5
    assert "  retries: team.info 1" in render(report).splitlines()


def _in_30_s(now: float) -> str:
    return email.utils.format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("retry_after", "waited"),
    [
        ("inf", RETRY_AFTER_DEFAULT_S),
        ("nan", RETRY_AFTER_DEFAULT_S),
        ("-3", RETRY_AFTER_DEFAULT_S),
        ("soon", RETRY_AFTER_DEFAULT_S),
        (_in_30_s, 30),
    ],
    ids=["inf", "nan", "negative", "unreadable", "http-date"],
)
def test_retry_after_waits_only_finite_sane_times(
    live: Live, retry_after: str | Callable[[float], str], waited: float
) -> None:
    live.clock.now = float(int(live.clock.now))  # an HTTP-date has whole seconds
    value = retry_after if isinstance(retry_after, str) else retry_after(live.clock.now)
    live.slack.faults.append(Fault("auth.test", "429", retry_after=value))
    sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    first, second = (e.at for e in live.slack.log if e.method == "auth.test")
    assert second - first == waited


def _auth_tests(live: Live) -> int:
    return sum(1 for e in live.slack.log if e.method == "auth.test")


@pytest.mark.parametrize(
    ("kind", "retry_after", "asked", "requests", "slept"),
    [
        ("429", "3600", "3600 s", 1, 0),
        ("ratelimited", "1e9", "1e+09 s", 1, 0),
        ("429", "600", "600 s more after 600 s", 2, 600),
    ],
    ids=["an-hour", "huge-in-a-body", "ten-minutes-twice"],
)
def test_retry_after_past_the_budget_stops_the_call_without_waiting(
    live: Live, kind: str, retry_after: str, asked: str, requests: int, slept: float
) -> None:
    # Every attempt is rate limited: waiting each one out would hold the writer lock for hours.
    live.slack.faults.append(Fault("auth.test", kind, times=8, retry_after=retry_after))
    with pytest.raises(
        SlackTransientError,
        match=rf"^Slack auth.test: gave up \(.*Slack asked to wait {re.escape(asked)}, "
        rf"longer than the {RETRY_AFTER_MAX_S:g} s a run waits per call",
    ):
        sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    assert sum(live.clock.slept) == slept <= RETRY_AFTER_MAX_S
    assert _auth_tests(live) == requests < live.settings.slack_max_attempts


def test_retry_after_waits_up_to_the_budget_in_all_and_not_a_second_more(live: Live) -> None:
    half = int(RETRY_AFTER_MAX_S / 2)
    live.slack.faults.append(Fault("auth.test", "429", times=2, retry_after=half))
    report = sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    assert report["rate_limit_wait_s"] == RETRY_AFTER_MAX_S
    live.slack.faults.append(Fault("auth.test", "429", times=2, retry_after=half))
    live.slack.faults.append(Fault("auth.test", "429", retry_after=1))
    before = _auth_tests(live)
    with pytest.raises(SlackTransientError, match=rf"wait 1 s more after {half * 2} s"):
        sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    assert _auth_tests(live) - before == 3


def test_cli_since_help_says_it_bounds_every_run(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["sync", "--help"])
    assert "every run" in " ".join(capsys.readouterr().out.split())


def test_an_identity_without_a_team_id_is_one_error(live: Live) -> None:
    body = {"ok": True, "url": "https://fjordline.slack.com/", "team": "Fjordline"}
    live.slack.faults.append(Fault("auth.test", "body", body=body))
    with pytest.raises(SlackApiError, match=r"^Slack auth.test: malformed response \(.*team_id"):
        sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)


def test_a_team_info_without_a_team_object_names_the_workspace_by_auth_test(live: Live) -> None:
    live.slack.faults.append(Fault("team.info", "body", body={"ok": True, "team": "oops"}))
    report = sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    assert any("team.info gave no team object" in item["problem"] for item in report["warnings"])
    assert query(
        live.settings.canonical_path, "select team_name, workspace_slug from workspaces"
    ) == [(live.slack.team_name, live.slack.team_domain)]


@pytest.mark.parametrize(
    ("method", "page"),
    [
        ("users.list", {"ok": True, "members": [{"id": "U1", "name": "lone \ud800"}]}),
        (
            "conversations.list",
            {"ok": True, "channels": [{"id": "D1", "is_im": True, "user": "\ud800"}]},
        ),
        ("conversations.members", {"ok": True, "members": ["U\ud800"]}),
    ],
)
def test_a_list_entry_the_store_cannot_hold_is_skipped_with_a_warning(
    live: Live, method: str, page: dict
) -> None:
    live.slack.faults.append(Fault(method, "body", body=page))
    report = sync(live.settings, SyncRequest(types=("im",)), clock=live.clock)
    assert any("not storable as JSON" in item["problem"] for item in report["warnings"])


def test_endless_empty_pages_that_promise_more_are_a_loop() -> None:
    # Each with a new cursor, they looped a sync forever (no cursor repeated).
    def page(number: int) -> dict[str, object]:
        return {"has_more": True, "response_metadata": {"next_cursor": f"c{number}"}}

    trail = CursorTrail("conversations.history")
    for number in range(MAX_EMPTY_PAGES):
        assert trail.follow(page(number), 0) == f"c{number}"
    assert trail.follow(page(-1), 5) == "c-1"  # a page with entries starts the count again
    for number in range(MAX_EMPTY_PAGES):
        trail.follow(page(MAX_EMPTY_PAGES + number), 0)
    with pytest.raises(SlackApiError, match="pages in a row held nothing yet promised more"):
        trail.follow(page(-2), 0)
