"""Who may see what, end to end: grants from the CLI, requesters over real HTTP through the
official MCP client, and `--as` on the CLI.

Chen Wei (U3) belongs to no restricted conversation of Acme; Bob Smith (U2) belongs to the
private channel, the DM and the group DM (tests/serving/slack_export.py). Every leak
attempt below is made as Chen and compared with what a nonexistent object gives.
"""

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import serving.artifact
import serving.lookups
from serving.access import Requester, rows_with_codes
from serving.answers import answer_question
from serving.engine import SearchEngine
from serving.models import SearchRequest
from serving.server import (
    PublishedLimits,
    build_http_app,
    grant_authorizer,
    warn_if_no_one_can_get_in,
    warn_if_open_to_the_network,
    warn_if_readable_by_other_accounts,
)
from slackquery.access.grants import GrantStore, grants_path
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import publish
from slackquery.cli import main
from slackquery.duckdb_setup import connect
from slackquery.errors import SlackqueryError
from slackquery.listening import listen_on
from slackquery.settings import Settings
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import synthesize_state
from tests.loopback import serve

from .conftest import Pipeline
from .slack_export import ACME, RESTRICTED_WORDS, message_id
from .test_mcp import ROOT, call, http_server, run_client

ADMIN = "admin-token-for-tests"
RESTRICTED = set(RESTRICTED_WORDS)
NARWHAL_ROOT = message_id(41, "G1")
THREAD = f"{ACME}:G1:{NARWHAL_ROOT.rsplit(':', 1)[1]}"
DM_MESSAGE = message_id(43, "D1")


def grant(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """Run `slackquery access grant … --json` and return its JSON (token included)."""
    capsys.readouterr()
    assert main(["access", "grant", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def cli_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 1
    return capsys.readouterr().err


@pytest.fixture
def tokens(published: Settings, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Grants for Bob, Chen, Bob without DMs, Bob in Beta, and one that expires."""
    made = {
        "bob": grant(capsys, "--user", "U2", "--workspace", "acme", "--label", "bob"),
        "chen": grant(capsys, "--user", "@chen.wei", "--workspace", "acme", "--label", "chen"),
        "bob-no-dms": grant(
            capsys,
            "--user",
            "@Bob Smith",
            "--workspace",
            "T0ACME",
            "--no-dms",
            "--label",
            "bob-no-dms",
        ),
        "bob-beta": grant(capsys, "--user", "U2", "--workspace", "beta", "--label", "bob-beta"),
        "expiring": grant(
            capsys,
            "--user",
            "U2",
            "--workspace",
            "acme",
            "--label",
            "expiring",
            "--expires",
            "2031-01-01",
        ),
    }
    assert made["chen"]["user_id"] == "U3" and made["chen"]["workspace_id"] == ACME
    assert made["bob-beta"]["workspace_id"] == "T0BETA"
    return {label: row["token"] for label, row in made.items()}


def test_a_bare_value_is_a_user_id_or_a_name(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # As `--from priya` takes it: no `@` needed for a name.
    by_name = grant(capsys, "--user", "Chen Wei", "--workspace", "beta", "--label", "by-name")
    by_id = grant(capsys, "--user", "U3", "--workspace", "beta", "--label", "by-id")
    assert (by_name["user_id"], by_name["workspace_id"]) == ("U3", "T0BETA")
    assert by_id["user_id"] == "U3"
    assert "unknown user 'Chen'" in cli_error(capsys, "access", "grant", "--user", "Chen")


def test_grants_from_the_cli(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    made = grant(capsys, "--user", "U3", "--workspace", "acme", "--label", "chen")
    assert made["token"].startswith("sqr_") and made["label"] == "chen"
    assert made["user_name"] == "Chen Wei"
    assert "ambiguous" in cli_error(capsys, "access", "grant", "--user", "@chen.wei")
    assert "unknown user 'U404'" in cli_error(capsys, "access", "grant", "--user", "U404")
    unknown = cli_error(capsys, "access", "grant", "--user", "U2", "--workspace", "gamma")
    assert unknown == (
        "error: unknown workspace 'gamma' in the published artifact; it has: "
        "acme (T0ACME, Acme Corp), beta (T0BETA, Beta Labs)\n"
    )
    assert "exists" in cli_error(
        capsys, "access", "grant", "--user", "U3", "--label", "chen", "--workspace", "acme"
    )
    stored = grants_path(published).read_text(encoding="utf-8")
    assert made["token"] not in stored and made["grant_id"] in stored
    assert grants_path(published).stat().st_mode & 0o077 == 0
    capsys.readouterr()
    assert main(["access", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["grants"]
    assert [row["label"] for row in listed] == ["chen"] and listed[0]["active"] is True
    assert "token" not in listed[0] and "token_sha256" not in listed[0]
    assert main(["access", "revoke", made["grant_id"]]) == 0
    assert "already revoked" in cli_error(capsys, "access", "revoke", "chen")
    assert "no grant" in cli_error(capsys, "access", "revoke", "nobody")
    for artifact in published.artifact_path.glob("search-*.duckdb"):
        assert made["token"].encode() not in artifact.read_bytes()
    # It printed the default label twice ("granted T0ACME:U2 (g_…): T0ACME:U2"), never a name.
    assert main(["access", "grant", "--user", "U2", "--workspace", "acme", "--no-dms"]) == 0
    granted, token = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"granted g_\w+ to Bob Smith \(T0ACME:U2\), no DMs", granted)
    assert token.startswith("token (shown once): sqr_")


def _channels(response: dict[str, Any]) -> set[str]:
    return {hit["channel_id"] for hit in response["results"]}


def _without_cited(checked: dict) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "cited"} for c in checked["citations"]]


def _same_error(forbidden: str, absent: str, forbidden_value: str, absent_value: str) -> None:
    """A forbidden object's error is the nonexistent one's, but for the value asked for."""
    assert forbidden.startswith("ERROR: ")
    assert forbidden.replace(forbidden_value, "<value>") == absent.replace(absent_value, "<value>")


async def _reuse_cursor(client: Client, bob: dict[str, Any]) -> str:
    """Bob's next-page cursor presented by another requester."""
    return await call(
        client,
        "search_slack",
        query="the",
        mode="lexical",
        limit=1,
        cursor=bob["page"]["next_cursor"],
    )


def test_a_non_member_sees_nothing_restricted_over_http(
    published: Settings, tokens: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    settings = published.model_copy(update={"serve_token": ADMIN})

    async def as_bob(client: Client) -> dict[str, Any]:
        seen = {}
        for channel, word in RESTRICTED_WORDS.items():
            hits = await call(client, "search_slack", query=word, mode="lexical")
            assert channel in _channels(hits), word
            seen[channel] = hits["results"][0]
        seen["page"] = await call(client, "search_slack", query="the", mode="lexical", limit=1)
        seen["thread"] = await call(client, "get_slack_thread", thread_id=THREAD)
        seen["alone"] = await call(client, "get_slack_thread", thread_id=DM_MESSAGE)
        return seen

    async def as_chen(client: Client, bob: dict[str, Any]) -> None:
        for channel, word in RESTRICTED_WORDS.items():
            for mode in ("lexical", "semantic", "hybrid"):
                hits = await call(
                    client, "search_slack", query=f"{word} budget roadmap", mode=mode, limit=50
                )
                assert not _channels(hits) & RESTRICTED, (word, mode)
            lexical = await call(client, "search_slack", query=word, mode="lexical")
            absent = await call(client, "search_slack", query="zzyzxq", mode="lexical")
            assert lexical["results"] == absent["results"] == []
            assert lexical["notes"] == [f"terms found in no message: '{word}'"]
            assert absent["notes"] == ["terms found in no message: 'zzyzxq'"]
            for filters in ({"channel_ids": [channel]}, {"conversation_types": ["private"]}):
                filtered = await call(client, "search_slack", query="the", **filters)
                assert isinstance(filtered, str) or not _channels(filtered) & RESTRICTED
            by_id = await call(client, "search_slack", query="the", channel_ids=[channel])
            none = await call(client, "search_slack", query="the", channel_ids=["G404"])
            _same_error(by_id, none, channel, "G404")
            hit = bob[channel]
            fetched = await call(client, "get_slack_message", document_id=hit["document_id"])
            missing = hit["document_id"][:-3] + "999"
            nothing = await call(client, "get_slack_message", document_id=missing)
            _same_error(fetched, nothing, hit["document_id"], missing)
            by_link = await call(client, "get_slack_message", document_id=hit["permalink"])
            bad_link = hit["permalink"].replace(hit["channel_id"], "C404")
            no_link = await call(client, "get_slack_message", document_id=bad_link)
            _same_error(by_link, no_link, hit["permalink"], bad_link)
            answer = await call(client, "answer_slack_question", question=f"what about {word}?")
            assert answer["verdict"] == "insufficient_evidence" and answer["citations"] == []
            for seen, unseen in (
                (f"[{hit['document_id']}]", f"[{missing}]"),
                (hit["document_id"], missing),
                (hit["permalink"], bad_link),
            ):
                cited = await call(client, "verify_citations", text=f"x {seen}")
                made_up = await call(client, "verify_citations", text=f"x {unseen}")
                assert cited["verdict"] == made_up["verdict"] == "unverified"
                # Every field but the cited text itself is the same: no resolved id, no kind
                # of its own, tells the requester that the hidden message exists.
                assert _without_cited(cited) == _without_cited(made_up), seen
        by_name = await call(client, "search_slack", query="in:#secret-plans the")
        no_name = await call(client, "search_slack", query="in:#secret-plane the")
        _same_error(by_name, no_name, "secret-plans", "secret-plane")
        assert "secret-plans" not in by_name.replace("'#secret-plans'", "")
        thread = await call(client, "get_slack_thread", thread_id=THREAD)
        no_thread = await call(client, "get_slack_thread", thread_id=THREAD + "9")
        _same_error(thread, no_thread, THREAD, THREAD + "9")
        via_message = await call(client, "get_slack_thread", thread_id=NARWHAL_ROOT)
        assert "no thread" in via_message
        # A hidden message with no replies is no thread of its own, as a made-up one is not.
        alone = await call(client, "get_slack_thread", thread_id=DM_MESSAGE)
        made_up = DM_MESSAGE[:-3] + "999"
        no_such = await call(client, "get_slack_thread", thread_id=made_up)
        _same_error(alone, no_such, DM_MESSAGE, made_up)
        # The thread's context document (root + reply) never votes: its words are unknown
        # and no hybrid hit comes from its channel.
        context = await call(client, "search_slack", query="narwhal launch checklist", limit=50)
        assert "G1" not in _channels(context)
        assert any("narwhal" in note for note in context["notes"])
        neighbours = await call(
            client,
            "get_slack_message",
            document_id=message_id(13),
            context_before=50,
            context_after=50,
        )
        assert {item["channel_id"] for item in neighbours["messages"]} == {"C1"}
        scopes = await call(client, "list_slack_scopes")
        assert {scope["channel_id"] for scope in scopes["scopes"]} == {"C1", "C2", "C3"}
        secret = await call(client, "list_slack_scopes", channel_name="secret-plans")
        assert "unknown channel" in secret and "close matches" not in secret
        beta = await call(client, "list_slack_scopes", workspace_id="beta")
        assert "unknown workspace 'beta'" in beta
        assert "cursor was issued for another" in await _reuse_cursor(client, bob)

    async def as_admin(client: Client, bob: dict[str, Any]) -> None:
        for word in RESTRICTED_WORDS.values():
            assert (await call(client, "search_slack", query=word, mode="lexical"))["results"]
        assert "cursor was issued for another" in await _reuse_cursor(client, bob)

    async def as_bob_without_dms(client: Client) -> None:
        assert (await call(client, "search_slack", query="narwhal", mode="lexical"))["results"]
        for channel in ("D1", "M1"):
            hits = await call(client, "search_slack", query=RESTRICTED_WORDS[channel])
            assert not _channels(hits) & {"D1", "M1"}
        dm = await call(client, "get_slack_message", document_id=DM_MESSAGE)
        assert "no message" in dm

    async def as_bob_in_beta(client: Client) -> None:
        hits = await call(client, "search_slack", query="ERR-42", mode="lexical")
        assert {hit["workspace_id"] for hit in hits["results"]} == {"T0BETA"}
        acme = await call(client, "get_slack_message", document_id=message_id(0))
        assert "no message" in acme
        scopes = await call(client, "list_slack_scopes")
        assert {scope["channel_id"] for scope in scopes["scopes"]} == {"C9"}

    with http_server(settings) as url:
        assert httpx.post(f"{url}/mcp", json={}).status_code == 401
        forged = {"Authorization": "Bearer sqr_not-a-granted-token"}
        assert httpx.post(f"{url}/mcp", json={}, headers=forged).status_code == 401
        bob = run_client(url, as_bob, tokens["bob"])
        assert bob["thread"]["messages"][0]["document_id"] == NARWHAL_ROOT
        assert [item["document_id"] for item in bob["alone"]["messages"]] == [DM_MESSAGE]
        run_client(url, lambda client: as_chen(client, bob), tokens["chen"])
        run_client(url, lambda client: as_admin(client, bob), ADMIN)
        run_client(url, as_bob_without_dms, tokens["bob-no-dms"])
        run_client(url, as_bob_in_beta, tokens["bob-beta"])
        # Revoked while the server runs: refused from the next request on.
        assert main(["access", "revoke", "chen"]) == 0
        revoked = {"Authorization": f"Bearer {tokens['chen']}"}
        assert httpx.post(f"{url}/mcp", json={}, headers=revoked).status_code == 401
        # A grants file that cannot be read, or is lost, refuses every granted token: not
        # ready either.
        kept = grants_path(settings).read_bytes()
        bob_calls = {"Authorization": f"Bearer {tokens['bob']}"}
        for damage in ("garbage", "lost"):
            if damage == "garbage":
                grants_path(settings).write_text("{garbage", encoding="utf-8")
            else:
                grants_path(settings).unlink()
            unready = httpx.get(f"{url}/readyz")
            assert (unready.status_code, unready.json()["error"]) == (
                503,
                "the access grants cannot be read, so granted tokens are refused; "
                "see the server log",
            ), damage
            assert httpx.post(f"{url}/mcp", json={}, headers=bob_calls).status_code == 503
            grants_path(settings).write_bytes(kept)
            assert httpx.get(f"{url}/readyz").status_code == 200


def test_expired_tokens_are_refused_from_the_day_after(
    published: Settings, tokens: dict[str, str]
) -> None:
    now = [datetime(2031, 1, 1, 23, 59, tzinfo=UTC)]

    async def scopes(client: Client) -> Any:
        return await call(client, "list_slack_scopes")

    with serve(build_http_app(published, clock=lambda: now[0]), lifespan="on") as url:
        assert run_client(url, scopes, tokens["expiring"])["scopes"]
        now[0] = datetime(2031, 1, 2, tzinfo=UTC)
        headers = {"Authorization": f"Bearer {tokens['expiring']}"}
        assert httpx.post(f"{url}/mcp", json={}, headers=headers).status_code == 401
        assert run_client(url, scopes, tokens["bob"])["scopes"]


def test_a_lost_grants_file_opens_nothing_and_an_unreadable_one_locks_out_only_requesters(
    tmp_path: Path,
) -> None:
    # With per-person tokens and no admin token, deleting access/grants.json (a restore
    # that missed it) served every private channel to anyone; later it refused every
    # granted token as unknown (401, which is not logged) while the server stayed ready.
    store = GrantStore(tmp_path / "access" / "grants.json")
    now = datetime(2031, 1, 1, tzinfo=UTC)
    made = {"user_id": "U3", "workspace_id": ACME, "no_dms": False, "expires": None, "now": now}
    _, token = store.add(label="chen", **made)
    bearer = f"Bearer {token}".encode()
    open_to_requesters = grant_authorizer(None, store, lambda: now)
    assert open_to_requesters(bearer) == (True, Requester("U3", ACME, False))
    store.path.unlink()
    assert open_to_requesters(b"") == (False, None)
    with pytest.raises(SlackqueryError, match="is missing"):  # 503 and a log line
        open_to_requesters(bearer)
    with pytest.raises(SlackqueryError, match="is missing"):  # not "no grants"
        store.add(label="lee", **made)
    assert grant_authorizer(None, GrantStore(tmp_path / "fresh" / "grants.json"), lambda: now)(
        b""
    ) == (True, None)  # a home that never granted stays the operator's own
    store.path.write_text("{garbage", encoding="utf-8")
    with_admin = grant_authorizer(ADMIN, store, lambda: now)
    assert with_admin(f"Bearer {ADMIN}".encode()) == (True, None)
    with pytest.raises(SlackqueryError, match="is unreadable"):  # 503 from the guard
        with_admin(bearer)
    shutil.rmtree(store.path.parent)  # the whole folder moved away while the server runs
    assert open_to_requesters(b"") == (False, None)
    with pytest.raises(SlackqueryError, match="is missing"):
        open_to_requesters(bearer)


def test_listening_beyond_loopback_without_any_token_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `serve --host 0.0.0.0` with no token and no grant served everything without a word.
    settings = Settings(home=tmp_path / "home")
    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
        caplog.clear()
        sockets = listen_on(host, 0)
        try:
            warn_if_open_to_the_network(settings, sockets)
            with_token = settings.model_copy(update={"serve_token": ADMIN})
            warn_if_open_to_the_network(with_token, sockets)
        finally:
            for sock in sockets:
                sock.close()
        assert caplog.messages == (
            [
                "listening on 0.0.0.0 without any token: anyone who reaches it reads every "
                "conversation; set SLACKQUERY_SERVE_TOKEN or grant tokens (`slackquery access "
                "grant`)"
            ]
            if warned
            else []
        )


def test_a_server_no_one_can_get_into_is_warned_about(
    published: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Every grant revoked and no admin token: every request is a 401, which is not logged.
    now = datetime(2030, 6, 1, tzinfo=UTC)
    store = GrantStore(grants_path(published))
    grant, _ = store.add(
        user_id="U3", workspace_id="T0ACME", label="p", no_dms=False, expires=None, now=now
    )
    warnings = []
    for revoked in (False, True):
        if revoked:
            store.revoke(grant.grant_id, now, by_id=True)
        for admin in (None, ADMIN):
            caplog.clear()
            warn_if_no_one_can_get_in(published.model_copy(update={"serve_token": admin}), now)
            warnings.append(len(caplog.messages))
    assert warnings == [0, 0, 1, 0]
    # A grants file lost from its folder: the warning blamed revoked grants.
    grants_path(published).unlink()
    warn_if_no_one_can_get_in(published, now)
    assert f"the grants file {grants_path(published)} is missing" in caplog.text


def test_conversations_other_accounts_can_read_are_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A home from before its folders were made private: 0755 all the way down from /tmp.
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        opened = Path(folder)
        opened.chmod(0o755)
        (opened / "artifacts").mkdir(mode=0o700)
        (opened / "canonical.duckdb").write_bytes(b"")  # rw-r--r--, as DuckDB makes it
        (opened / "state.duckdb").write_bytes(b"")
        (opened / "state.duckdb").chmod(0o600)
        (tmp_path / "artifacts").mkdir(mode=0o755)  # under pytest's own 0700 folder
        for home, warned in ((opened, [opened / "canonical.duckdb"]), (tmp_path, [])):
            caplog.clear()
            warn_if_readable_by_other_accounts(Settings(home=home))
            assert caplog.messages == [
                f"every account on this machine can read the conversations in {path}; "
                "`chmod 700` the home (or a folder above) unless they all should"
                for path in warned
            ]


def test_an_expiry_already_past_is_refused(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["access", "grant", "--user", "U3", "--workspace", "acme", "--expires", "2020-01-01"]
    error = cli_error(capsys, *argv)
    assert error.startswith("error: --expires 2020-01-01 is past") and error.count("\n") == 1
    assert not grants_path(published).exists()  # no token that could never work
    # The expiry is the last UTC day the token works: on that day it may still be granted.
    store = GrantStore(grants_path(published))
    last_minute = datetime(2031, 1, 1, 23, 59, tzinfo=UTC)
    made = {"user_id": "U3", "workspace_id": ACME, "no_dms": False, "now": last_minute}
    grant, _ = store.add(label="today", expires="2031-01-01", **made)
    assert grant.is_active(last_minute)
    with pytest.raises(SlackqueryError, match="must be 2031-01-01 or later"):
        store.add(label="yesterday", expires="2030-12-31", **made)


def test_membership_change_applies_after_the_next_publish(
    publishable: Settings, pipeline: Pipeline
) -> None:
    chen = Requester("U3", ACME)
    engine = SearchEngine(publishable)
    try:
        request = SearchRequest(query="narwhal", mode="lexical")
        assert engine.search(request, requester=chen).results == []
        publish(publishable, pipeline.second_build)
        after = engine.search(request, requester=chen)
        assert {hit.channel_id for hit in after.results} == {"G1"}
        assert engine.get_thread(THREAD, requester=chen).messages
    finally:
        engine.close()


def test_cli_as_a_requester(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    for word in RESTRICTED_WORDS.values():
        capsys.readouterr()
        args = ["search", word, "--mode", "lexical", "--json"]
        assert main([*args, "--as", "@chen.wei", "--as-workspace", "acme"]) == 0
        as_chen = json.loads(capsys.readouterr().out)
        assert as_chen["results"] == [] and as_chen["notes"] == [
            f"terms found in no message: '{word}'"
        ]
        assert main([*args, "--as", "U2", "--as-workspace", "acme"]) == 0
        assert json.loads(capsys.readouterr().out)["results"]
        assert main(args) == 0  # the local operator sees everything
        assert json.loads(capsys.readouterr().out)["results"]
    error = cli_error(
        capsys, "search", "the", "--in", "#secret-plans", "--as", "U3", "--as-workspace", "acme"
    )
    assert "unknown channel '#secret-plans'" in error
    assert "ambiguous" in cli_error(capsys, "search", "the", "--as", "@chen.wei")


def test_stdio_as_a_requester(published: Settings) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(published.home)
    arguments = ["-m", "slackquery.cli", "serve", "--stdio", "--as", "U3", "--as-workspace", "acme"]
    parameters = StdioServerParameters(command=sys.executable, args=arguments, env=env, cwd=ROOT)

    async def main() -> tuple[Any, Any]:
        async with Client(parameters) as client:
            hidden = await call(client, "search_slack", query="narwhal", mode="lexical")
            scopes = await call(client, "list_slack_scopes")
            return hidden, scopes

    hidden, scopes = anyio.run(main)
    assert hidden["results"] == [] and hidden["notes"] == ["terms found in no message: 'narwhal'"]
    assert {scope["channel_id"] for scope in scopes["scopes"]} == {"C1", "C2", "C3"}


def test_a_hidden_thread_is_not_read(engine: SearchEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # Reading a hidden thread's rows only to drop them took longer than looking up a
    # made-up id: the time told that the thread exists, and roughly how long it is.
    read: list[str] = []
    original = serving.lookups.thread_messages

    def counted(cursor: Any, thread_id: str, limit: int, offset: int) -> Any:
        read.append(thread_id)
        return original(cursor, thread_id, limit, offset)

    monkeypatch.setattr(serving.lookups, "thread_messages", counted)
    chen = Requester("U3", ACME)
    for thread_id in (THREAD, NARWHAL_ROOT):
        with pytest.raises(SlackqueryError, match="no thread"):
            engine.get_thread(thread_id, requester=chen)
    assert read == []
    assert engine.get_thread(THREAD).messages and read == [THREAD]


def test_a_hidden_channel_named_in_a_question_is_not_a_scope(engine: SearchEngine) -> None:
    chen, bob = Requester("U3", ACME), Requester("U2", ACME)

    def scoped(question: str, requester: Requester) -> set[str] | None:
        response = engine.search(SearchRequest(query=question), requester=requester)
        if "scope" not in response.weights:
            return None
        return {hit.channel_id for hit in response.results if hit.scope is not None}

    assert scoped("the launch checklist in #secret-plans", bob) == {"G1"}
    for channel in ("#secret-plans", "#no-such-channel"):  # alike to Chen, who is no member
        assert scoped(f"the launch checklist in {channel}", chen) is None
        on_day = scoped(f"the launch checklist in {channel} on Mar 3", chen)
        assert on_day and "G1" not in on_day

    # Named beside a channel they see, a hidden channel is not named in the notes either.
    def scope_notes(question: str, requester: Requester) -> list[str]:
        response = engine.search(SearchRequest(query=question), requester=requester)
        return [note for note in response.notes if "scope" in note]

    named = "ranked up messages in the scope the question names: #eng"
    assert scope_notes("the checklist in #eng and #no-such-channel", chen) == [named]
    assert scope_notes("the checklist in #eng and #secret-plans", chen) == [named]
    assert scope_notes("the checklist in #eng and #secret-plans", bob) == [
        named + ", #secret-plans"
    ]


def test_the_times_and_names_a_question_is_read_against_are_the_requesters(
    engine: SearchEngine,
) -> None:
    # The artifact's newest message is in a group DM Chen is not in: a day named without
    # a year was read in its span, and a name of someone who wrote only where Chen may
    # not look resolved, so either told of hidden messages (a QA probe's A/B homes).
    chen = Requester("U3", ACME)
    with engine.artifact() as artifact:
        visible = artifact.visibility(chen)
        assert visible is not None
        seen = artifact.ts_us[visible.rows]
        assert artifact.time_span_us(visible) == (int(seen.min()), int(seen.max()))
        assert artifact.time_span_us()[1] == int(artifact.ts_us.max()) > int(seen.max())
        zoe = artifact.author_code_of["U4"]
        assert visible.authors[zoe] and artifact.resolve_authors(["@zoe.muller"], visible) == (
            "U4",
        )
        unwritten = dataclasses.replace(visible, authors=visible.authors.copy())
        unwritten.authors[zoe] = False  # as if Zoë wrote only in the group DM
        assert artifact.authors_named_in("what did Zoë say", unwritten).size == 0
        assert zoe in artifact.authors_named_in("what did Zoë say", visible)
        errors = []
        for name in ("@zoe.muller", "@nobody"):
            with pytest.raises(SlackqueryError) as error:
                artifact.resolve_authors([name], unwritten)
            errors.append(str(error.value).replace(name, "NAME"))
        assert errors[0] == errors[1]


def test_a_deactivated_account_sees_nothing_and_a_guest_only_its_conversations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A grant (or a membership) outlived the person: a deactivated user's token read on;
    # and a guest's token read every public channel, which Slack never shows a guest.
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=60)
    publish(settings, build_artifact(settings))
    conn = connect(str(settings.state_path))
    try:
        left, guest, stayed = (
            row[0]
            for row in conn.execute(
                "select author_id from search_documents where workspace_id = 'W0' "
                "group by all order by bool_or(conversation_type = 'public'), count(*) desc"
            ).fetchall()[:3]
        )
        member_of = {
            row[0]
            for row in conn.execute(
                "select channel_id from search_documents where author_id = $u "
                "and workspace_id = 'W0'",
                {"u": guest},
            ).fetchall()
        }
        conn.execute(
            "update search_users set account_limit = case user_id when $left then "
            "'deactivated' when $guest then 'guest' end where workspace_id = 'W0'",
            {"left": left, "guest": guest},
        )
    finally:
        conn.close()
    before = grant(capsys, "--user", left, "--workspace", "W0")  # while still a member
    publish(settings, build_artifact(settings))
    engine = SearchEngine(settings)

    def channels_seen(user: str) -> set[str]:
        requester = Requester(user, "W0")
        scopes = {scope.channel_id for scope in engine.list_scopes(requester=requester).scopes}
        listed = engine.search(
            SearchRequest(query="", start_ts_us=0, limit=50), requester=requester
        )
        assert {hit.channel_id for hit in listed.results} <= scopes
        return scopes

    try:
        assert channels_seen(left) == set()
        assert channels_seen(guest) == member_of
        assert channels_seen(stayed) > {"C0X0"}  # a full member: the public channel too
    finally:
        engine.close()
    assert "C0X0" not in member_of  # the guest wrote only in private channels
    assert main(["access", "grant", "--user", left, "--workspace", "W0"]) == 1
    assert "is deactivated in Slack" in capsys.readouterr().err
    guests = grant(capsys, "--user", guest, "--workspace", "W0")
    assert main(["access", "list", "--json"]) == 0
    listed = {row["grant_id"]: row for row in json.loads(capsys.readouterr().out)["grants"]}
    assert listed[before["grant_id"]]["account_limit"] == "deactivated"
    assert listed[before["grant_id"]]["active"]
    assert listed[guests["grant_id"]]["account_limit"] == "guest"
    assert main(["access", "list"]) == 0
    out = capsys.readouterr().out
    assert "deactivated in Slack (sees nothing)" in out and "guest (only the conv" in out
    # Over HTTP the deactivated account's token is refused as a revoked one is: its
    # session and `/metrics` answered it, though every tool showed it nothing.
    with serve(build_http_app(settings), lifespan="on") as url:
        for token, status in ((before["token"], 401), (guests["token"], 200)):
            headers = {"Authorization": f"Bearer {token}"}
            assert httpx.get(f"{url}/metrics", headers=headers).status_code == status


def test_the_guard_reads_account_limits_once_per_artifact_whatever_it_finds(
    tmp_path: Path,
) -> None:
    # A pointer to a pruned or damaged file made every granted request a 500 from the guard.
    pointed = [tmp_path / "search-gone.duckdb"]
    engine = SimpleNamespace(resolve=lambda: pointed[0])
    limits = PublishedLimits(engine)  # type: ignore[arg-type]
    requester = Requester("U1", "W0")
    assert limits(requester) is None
    pointed[0] = tmp_path / "search-junk.duckdb"
    pointed[0].write_bytes(b"not a database" * 100)
    assert limits(requester) is None
    pointed[0].unlink()  # read once: the same path is not opened again
    assert limits(requester) is None


def test_evidence_strength_counts_only_the_messages_a_requester_sees(
    engine: SearchEngine,
) -> None:
    chen = Requester("U3", ACME)  # no member of G1, where alone "narwhal" was written

    def strengths(question: str, requester: Requester | None) -> list[float]:
        answered = answer_question(engine, question, requester=requester)
        return [part.strength for part in answered.parts]

    hidden, unknown = "ERR-42 on payments narwhal", "ERR-42 on payments zzqqxx"
    assert strengths(hidden, chen) == strengths(unknown, chen)
    assert strengths(hidden, None) != strengths(unknown, None)  # the operator sees G1


def test_bm25_counts_only_the_documents_a_requester_sees(engine: SearchEngine) -> None:
    chen = Requester("U3", ACME)
    request = SearchRequest(query="the", mode="lexical", limit=50)
    overall = {hit.document_id: hit for hit in engine.search(request).results}
    scoped = engine.search(request, requester=chen).results
    with engine.artifact() as artifact:
        bm25, visible = artifact.bm25, artifact.visibility(chen)
        assert visible is not None
        term = bm25.term_ids["the"]
        postings = bm25.posting_rows[bm25.offsets[term] : bm25.offsets[term + 1]]
        seen = np.count_nonzero(visible.rows[postings])
        assert 0 < seen < postings.size  # hidden messages say "the" too
        factor = bm25.idf_of(np.array([seen]), visible.document_count)[0] / bm25.idf[term]
    compared = [hit for hit in scoped if hit.document_id in overall]
    assert compared and not {hit.channel_id for hit in scoped} & RESTRICTED
    for hit in compared:
        expected = overall[hit.document_id].lexical.score * factor
        assert hit.lexical.score == pytest.approx(expected, abs=2e-6)


def test_a_requesters_semantic_ranking_is_the_operators_without_what_they_cannot_see(
    engine: SearchEngine,
) -> None:
    chen = Requester("U3", ACME)
    with engine.artifact() as artifact:
        visible = artifact.visibility(chen)
        assert visible is not None
    for query in ("deploy failed on staging", "who handles the billing question", "lunch"):
        everything = engine.search(SearchRequest(query=query, mode="semantic", limit=50))
        expected = [
            hit.document_id
            for hit in everything.results
            if (hit.workspace_id, hit.channel_id) in visible.channels
        ][:10]
        scoped = engine.search(
            SearchRequest(query=query, mode="semantic", limit=10), requester=chen
        )
        assert len(expected) == 10 and ids_of(scoped) == expected


def ids_of(response: Any) -> list[str]:
    return [hit.document_id for hit in response.results]


def test_a_listing_shows_a_requester_only_what_they_see(engine: SearchEngine) -> None:
    chen, bob = Requester("U3", ACME), Requester("U2", ACME)
    listing = SearchRequest(query="from:@bob.smith", workspace_ids=[ACME], limit=50)
    everything = {hit.channel_id for hit in engine.search(listing).results}
    assert everything & RESTRICTED  # Bob writes in the restricted conversations too
    assert {hit.channel_id for hit in engine.search(listing, requester=bob).results} == everything
    assert not {hit.channel_id for hit in engine.search(listing, requester=chen).results} & (
        RESTRICTED
    )
    errors = []
    for name in ("secret-plans", "secret-plane"):  # the private channel, and no channel
        with pytest.raises(SlackqueryError) as raised:
            engine.search(SearchRequest(query=f"in:#{name}"), requester=chen)
        errors.append(str(raised.value).replace(name, "<value>"))
    assert errors[0] == errors[1]


def test_an_artifact_keeps_the_visibility_of_its_latest_requesters_only(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving.artifact, "VISIBILITIES_KEPT", 2)
    first, second, third = (Requester(user, ACME) for user in ("U1", "U2", "U3"))
    with engine.artifact() as artifact:
        kept = artifact.visibility(first)
        assert artifact.visibility(second) is not None
        assert artifact.visibility(first) is kept  # seen again: now the latest
        assert artifact.visibility(third) is not None  # evicts `second`, the oldest
        assert artifact.visibility(first) is kept
        second_again = artifact.visibility(second)
        assert second_again is not None and artifact.visibility(second) is second_again
        assert artifact.visibility(third) is not kept and artifact.visibility(first) is not kept


@pytest.mark.parametrize("wanted", [[], [3], [0, 4, 6], list(range(7))])
def test_rows_with_codes_is_membership_of_each_rows_code(wanted: list[int]) -> None:
    codes = np.random.default_rng(5).integers(0, 7, 1_000).astype(np.int32)
    expected = np.array([code in wanted for code in codes.tolist()])
    assert np.array_equal(rows_with_codes(codes, wanted, 7), expected)


def test_a_message_record_is_none_to_whom_may_not_see_it(engine: SearchEngine) -> None:
    chen, bob = Requester("U3", ACME), Requester("U2", ACME)  # bob is in #secret-plans
    record = engine.message_record(NARWHAL_ROOT, bob)
    assert record is not None and record.text.startswith("Private roadmap")
    # to Chen it is as absent as an id that was never there
    assert engine.message_record(NARWHAL_ROOT, chen) is None
    assert engine.message_record(message_id(99, "G1"), bob) is None
