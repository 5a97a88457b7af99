"""`slackquery search` prints readable results and the tool's JSON structure; every
readable output escapes the terminal controls archive text may hold."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serving.answer_models import (
    AnswerPart,
    AnswerResponse,
    Citation,
    CitationCheck,
    Evidence,
    ThreadStart,
    VerificationResponse,
)
from serving.cursor import home_secret
from serving.engine import NO_REPLIES_NOTE
from serving.models import (
    AttachedFile,
    MessageRecord,
    ScopeRecord,
    ScopesResponse,
    SearchHit,
    SearchHitBase,
    SearchResponse,
    ThreadResponse,
)
from slackquery.cli import main
from slackquery.commands import ask, scopes, search, thread, verify
from slackquery.settings import Settings


def test_search_command_text_and_json(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "ERR-42", "--in", "#eng", "--mode", "lexical", "--limit", "3"]) == 0
    text = capsys.readouterr().out
    assert "#eng" in text and "https://acme.slack.com/archives/C1/" in text
    assert "**ERR**-**42**" in text  # the match is highlighted (piped: no escapes)
    assert "**eng**" not in text  # an operator's value is not a search term
    assert main(["search", "what is the password for the vault", "--mode", "lexical"]) == 0
    text = capsys.readouterr().out
    assert "**vault**" in text and "**the**" not in text  # stop words are not highlighted
    assert main(["search", "password", "--from", "@priya patel", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"results", "next_cursor", "route", "artifact_id"} <= set(payload)
    assert {hit["author_id"] for hit in payload["results"]} == {"U1"}


def test_search_command_says_which_days_a_time_filter_keeps(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # `during:march` is the latest March past: an archive of an older year answered with
    # "0 result(s)" and no word of which March it had searched.
    assert main(["search", "password during:2031-03"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("0 result(s) for 'password'")
    assert text.splitlines()[1] == "  posted from 2031-03-01 to 2031-03-31 (UTC days)"
    assert main(["search", "password after:2023-11-13"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "  posted from 2023-11-14 (UTC days)"
    assert main(["search", "password"]) == 0
    assert "posted" not in capsys.readouterr().out.splitlines()[1]


def test_search_command_shows_what_a_reply_answers(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "cleaned old docker images", "--mode", "lexical", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the reply, then the first message of its thread, then the reply's permalink
    assert "40% free now" in lines[2]
    assert lines[3] == "    in reply to Zoë Müller: The staging cluster is out of disk space again"
    # The query's terms in the thread's first message are highlighted: they count toward
    # the reply's lexical score.
    assert main(["search", "docker images on staging", "--mode", "lexical", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "40% free now" in lines[2]
    highlighted = "The **staging** cluster is out of disk space again"
    assert lines[3] == f"    in reply to Zoë Müller: {highlighted}"
    assert main(["search", "staging cluster out of disk", "--mode", "lexical", "--limit", "1"]) == 0
    assert "in reply to" not in capsys.readouterr().out  # a thread's first message


def test_search_command_user_error(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "deploy", "--in", "#engg"]) == 1
    assert "unknown channel" in capsys.readouterr().err


def test_search_command_cursor_works_in_the_next_command(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each command is a new engine: without SLACKQUERY_CURSOR_SECRET its key is the home's.
    assert main(["search", "password", "--limit", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["next_cursor"]
    assert (
        main(["search", "password", "--limit", "1", "--cursor", first["next_cursor"], "--json"])
        == 0
    )
    second = json.loads(capsys.readouterr().out)
    assert second["results"] and second["results"] != first["results"]
    assert (first["offset"], second["offset"]) == (0, 1)
    # Read as text, the second page goes on numbering where the first stopped.
    assert main(["search", "password", "--limit", "1", "--cursor", first["next_cursor"]]) == 0
    header, numbered, *_ = capsys.readouterr().out.splitlines()
    assert header.startswith("1 result(s) for 'password'") and numbered.lstrip().startswith("2.")
    key = published.home / "cursor.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_thread_command_reads_a_thread_by_any_of_its_messages(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "40% free now", "--mode", "lexical", "--limit", "1", "--json"]) == 0
    reply = json.loads(capsys.readouterr().out)["results"][0]
    assert main(["thread", reply["permalink"]]) == 0
    header, root_byline, root_text, *rest = capsys.readouterr().out.splitlines()
    assert header.startswith(f"thread {reply['thread_id']} in #eng · messages 1-")
    assert root_byline.startswith("#eng · Zoë Müller · ")
    assert root_text == "    The staging cluster is out of disk space again"
    assert any("40% free now" in line for line in rest) and not rest[-1].startswith("more")
    # A page at a time: the cursor printed works in the next command, for the same thread.
    assert main(["thread", reply["document_id"], "--limit", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["truncated"] and first["thread_id"] == reply["thread_id"]
    following = ["thread", reply["thread_id"], "--limit", "1", "--cursor", first["next_cursor"]]
    assert main(following) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith(f"· messages 2-2 · artifact {first['artifact_id']}")
    assert main(["thread", "T0ACME:C1:1"]) == 1
    assert "no thread 'T0ACME:C1:1'" in capsys.readouterr().err
    # A message with no replies prints alone, with the note that says so.
    assert main(["thread", "T0ACME:C1:1709355600.000021"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("thread T0ACME:C1:1709355600.000021 in #eng · messages 1-1 ")
    assert printed[-1] == f"note: {NO_REPLIES_NOTE}"


def test_home_secret_is_made_once_and_only_in_an_existing_folder(tmp_path: Path) -> None:
    assert home_secret(tmp_path / "missing" / "cursor.key") is None
    secret = home_secret(tmp_path / "cursor.key")
    assert secret and home_secret(tmp_path / "cursor.key") == secret
    assert [path.name for path in tmp_path.iterdir()] == ["cursor.key"]


def test_scopes_command_lists_what_the_requester_may_search(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scopes"]) == 0
    text = capsys.readouterr().out
    assert "acme  #eng (public)" in text and "#secret-plans (private)" in text
    assert "beta  #eng (public)" in text
    assert text.splitlines()[-1].startswith("7 channel(s) in artifact ")  # DMs and group DM too
    assert main(["scopes", "--as", "U3", "--as-workspace", "acme", "--json"]) == 0
    seen = {scope["channel_id"] for scope in json.loads(capsys.readouterr().out)["scopes"]}
    assert seen == {"C1", "C2", "C3"}  # Chen is in no private channel, DM or group DM
    assert main(["scopes", "--channel", "#engg"]) == 1
    assert 'close matches: "eng"' in capsys.readouterr().err
    assert main(["scopes", "--limit", "6", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["truncated"] and len(first["scopes"]) == 6
    assert main(["scopes", "--limit", "6"]) == 0  # a page, not the whole listing
    assert "channels 1-6 in artifact " in capsys.readouterr().out
    assert main(["scopes", "--limit", "6", "--cursor", first["next_cursor"]]) == 0
    last = capsys.readouterr().out.splitlines()
    assert len(last) == 2 and last[-1].startswith("channels 7-7 in artifact ")
    assert main(["scopes", "--channel", "#eng", "--cursor", first["next_cursor"]]) == 1
    assert "cursor was issued for another" in capsys.readouterr().err
    for empty in (["--channel", "#"], ["--workspace", " "]):
        assert main(["scopes", *empty]) == 1
        assert "must not be empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "invoice"],
        ["scopes"],
        ["thread", "T0ACME:C1:1"],
        ["ask", "who sent the invoice?"],
        ["verify", "sent [T0ACME:C1:1]"],
        ["serve", "--stdio"],
    ],
)
@pytest.mark.parametrize("option", [["--as-no-dms"], ["--as-workspace", "acme"], ["--as", ""]])
def test_requester_options_without_as_are_a_usage_error(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], option: list[str]
) -> None:
    # Ignored, they would act as the local operator: `--as-no-dms` would show every DM.
    with pytest.raises(SystemExit) as exited:
        main([*argv, *option])
    assert exited.value.code == 2
    expected = "--as needs a user" if option == ["--as", ""] else f"{option[0]} applies to --as"
    assert f"error: {expected}" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--as-no-dms"], ["--as-workspace", "acme"], ["--as", "U3"]])
def test_requester_options_over_http_are_refused(
    home: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:  # refused before any server starts
        main(["serve", *option])
    assert exited.value.code == 2
    assert "applies to --stdio; over HTTP each token names its requester" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("port", ["0", "99999", "-1", "http"])
def test_serve_refuses_a_port_outside_1_to_65535(
    home: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    # 0 would have served on SLACKQUERY_SERVE_PORT; 99999 failed in bind() with tracebacks.
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", port])
    assert exited.value.code == 2
    assert "slackquery serve: error: argument --port: " in capsys.readouterr().err


def test_serve_names_the_address_it_cannot_listen_on(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
    assert capsys.readouterr().err == (
        f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )
    # An address of no interface here (TEST-NET-1), and a name no resolver is asked about.
    assert main(["serve", "--host", "192.0.2.1", "--port", str(port)]) == 1
    assert capsys.readouterr().err == (
        f"error: cannot listen on 192.0.2.1:{port}: cannot assign requested address\n"
    )
    overlong = "x" * 64 + ".example"  # a label of 64 characters; DNS allows 63
    assert main(["serve", "--host", overlong, "--port", str(port)]) == 1
    expected = f"error: cannot listen on {overlong}:{port}: not a host name\n"
    assert capsys.readouterr().err == expected


def test_serve_says_where_it_listens_and_logs_one_line_per_record(home: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env.update(SLACKQUERY_HOME=str(home), COLUMNS="80")
    command = [sys.executable, "-m", "slackquery.cli", "serve", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        started = server.stderr.readline()
        url = f"http://127.0.0.1:{port}"
        assert started.endswith(
            f" INFO serving.server: serving MCP at {url}/mcp (probes /healthz, /readyz; "
            "Ctrl-C stops)\n"
        )
        assert httpx.get(f"{url}/readyz").status_code == 503  # nothing published in `home`
        refused = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        refused["params"] = {"name": "search_slack", "arguments": {"query": "x", "limit": 0}}
        headers = {"Accept": "application/json, text/event-stream"}
        assert httpx.post(f"{url}/mcp", json=refused, headers=headers).status_code == 200
    finally:
        server.terminate()
        _, logged = server.communicate(timeout=30)
    # The unready probe is one record on one line, however long, and the call one access
    # line; the SDK's INFO lines for each request (a refused tool call, a stateless session
    # ending) are not logged. SIGTERM ends it as it ends any command, after uvicorn's
    # graceful shutdown.
    lines = logged.splitlines()
    assert lines == [
        next(line for line in lines if "WARNING serving.server: not ready:" in line),
        next(line for line in lines if "INFO serving.access_log: operator search_slack " in line),
        "error: terminated",
    ]
    assert server.returncode == 128 + signal.SIGTERM
    assert "run `slackquery reconcile` (after `slackquery import` or `sync`)" in logged


# Archive text as an export can hold it: an ESC sequence that would recolour (or clear)
# the operator's terminal, and a right-to-left override that reorders the line after it.
HOSTILE_TEXT = "hello \x1b[31mRED\x1b[0m staging\ndone"
HOSTILE_NAME = "Mallory \u202eevil\x07"
ESCAPED_TEXT = "hello \\x1b[31mRED\\x1b[0m **staging** done"  # piped: `**` highlights
ESCAPED_NAME = "Mallory \\u202eevil\\x07"


def _hit(document_id: str, thread_root_id: str) -> SearchHitBase:
    return SearchHit(
        document_id=document_id,
        source_message_id=None,
        workspace_id="T1",
        workspace_name="Acme",
        channel_id="C1",
        channel_name="eng\u202e",
        conversation_type="public",
        author_id="U9",
        author_name=HOSTILE_NAME,
        ts_us=1_700_000_000_000_000,
        timestamp="2023-11-14T22:13:20Z",
        thread_id=thread_root_id,
        thread_root_id=thread_root_id,
        text=HOSTILE_TEXT,
        text_truncated=False,
        permalink="https://acme.slack.com/archives/C1/p1700000000000000\x1b]8;;x\x07",
        fused_score=0.5,
    )


def _assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert ESCAPED_NAME in text


def _response(
    hits: list[SearchHitBase], next_cursor: str | None = None, notes: list[str] | None = None
) -> SearchResponse:
    """A lexical search response for 'staging' holding `hits`."""
    return SearchResponse(
        query="staging",
        mode="lexical",
        route="exact",
        weights={},
        filters={},
        artifact_id="b1",
        generation_id="g1",
        results=hits,
        next_cursor=next_cursor,
        notes=notes or [],
        timings_ms={},
    )


def test_search_render_escapes_archive_text() -> None:
    hit = _hit("T1:C1:2.0", thread_root_id="T1:C1:1.0")
    start = MessageRecord(
        **(hit.model_dump() | {"document_id": "T1:C1:1.0", "author_name": HOSTILE_NAME}),
        is_thread_parent=True,
        is_thread_reply=False,
    )
    response = _response([hit], notes=["terms found in no message: \x1b[2J"])
    text = search.render(response, {hit.document_id: start})
    _assert_escaped(text)
    lines = text.splitlines()
    assert lines[1] == f" 1. #eng\\u202e · {ESCAPED_NAME} · 2023-11-14 22:13 UTC · score 0.5000"
    assert lines[2] == f"    {ESCAPED_TEXT}"  # the message's own newline folded, as before
    assert lines[3] == f"    in reply to {ESCAPED_NAME}: {ESCAPED_TEXT}"
    assert lines[4].endswith("p1700000000000000\\x1b]8;;x\\x07")
    assert lines[5] == "note: terms found in no message: \\x1b[2J"


def test_a_cursor_no_other_process_could_use_is_not_printed() -> None:
    # With no kept cursor key (a read-only home), the cursor is signed with this process's
    # random key: the next `search --cursor` refused it.
    response = _response([_hit("T1:C1:2.0", thread_root_id="T1:C1:2.0")], next_cursor="abc")
    assert search.render(response).splitlines()[-1] == "more: --cursor abc"
    last = search.render(response, cursor_lasts=False).splitlines()[-1]
    assert "--cursor" not in last and "SLACKQUERY_CURSOR_SECRET" in last


def test_ask_render_escapes_archive_text() -> None:
    hit = _hit("T1:C1:1.0", thread_root_id="T1:C1:1.0")
    evidence = Evidence(
        **hit.model_dump(),
        sentence=HOSTILE_TEXT,
        highlighted=f"**{HOSTILE_TEXT}**",
        coverage=1.0,
        is_correction=False,
        in_reply_to=ThreadStart(
            document_id="T1:C1:0.5",
            author_name=HOSTILE_NAME,
            timestamp=hit.timestamp,
            text="why \x1b[5mblink",
            permalink=None,
        ),
    )
    answer = f"colour: {HOSTILE_TEXT} [{hit.document_id}]\nname: {HOSTILE_NAME} [{hit.document_id}]"
    response = AnswerResponse(
        question="what \u202edid they say?",
        verdict="answered",
        answer=answer,
        unsupported_parts=[],
        citations=[Citation(document_id=hit.document_id, source_message_id=None, permalink=None)],
        parts=[
            AnswerPart(
                part="what did they say",
                supported=True,
                strength=1.0,
                threshold=0.5,
                answer=answer,
                conflict=None,
                evidence=[evidence],
            )
        ],
        artifact_id="b1",
        notes=["terms found in no message: \x1b[2J"],
        timings_ms={},
    )
    text = ask.render(response)
    _assert_escaped(text)
    lines = text.splitlines()
    assert lines[0] == "answered: what \\u202edid they say?"
    # The answer keeps its newlines (one line per part, and the message's own): only the
    # terminal controls are written out.
    assert lines[2:5] == [
        "colour: hello \\x1b[31mRED\\x1b[0m staging",
        "done [T1:C1:1.0]",
        f"name: {ESCAPED_NAME} [T1:C1:1.0]",
    ]
    assert f"[T1:C1:1.0] #eng\\u202e · {ESCAPED_NAME} · 2023-11-14 22:13 UTC" in lines
    assert "    **hello \\x1b[31mRED\\x1b[0m staging done**" in lines
    assert f"    in reply to {ESCAPED_NAME}: why \\x1b[5mblink" in lines
    assert lines[-2] == "note: terms found in no message: \\x1b[2J"


def _thread_page(hit: SearchHitBase, next_cursor: str | None = None) -> ThreadResponse:
    """A thread page of one message, the thread's first: the hit's."""
    message = MessageRecord(**hit.model_dump(), is_thread_parent=True, is_thread_reply=False)
    return ThreadResponse(
        thread_id=hit.document_id,
        messages=[message],
        offset=0,
        truncated=next_cursor is not None,
        next_cursor=next_cursor,
        artifact_id="b1",
    )


def test_thread_render_escapes_archive_text_and_keeps_its_lines() -> None:
    page = _thread_page(_hit("T1:C1:1.0", thread_root_id="T1:C1:1.0"), next_cursor="c1")
    lines = thread.render(page).splitlines()
    _assert_escaped("\n".join(lines))
    assert lines[1] == f"#eng\\u202e · {ESCAPED_NAME} · 2023-11-14 22:13 UTC"
    # The text's own line break is kept, each line indented; its controls are escaped.
    assert lines[2:4] == ["    hello \\x1b[31mRED\\x1b[0m staging", "    done"]
    assert lines[-1] == "more: --cursor c1"


def test_search_and_thread_render_name_attached_files_escaped() -> None:
    files = [
        AttachedFile(file_id="F1", name="pg.log", title="Postgres log", mimetype="text/plain"),
        AttachedFile(file_id="F2", name=HOSTILE_NAME, title=HOSTILE_NAME, mimetype=None),
        AttachedFile(file_id="F3", name=None, title=None, mimetype=None),
    ]
    hit = _hit("T1:C1:1.0", thread_root_id="T1:C1:1.0").model_copy(update={"files": files})
    # A title the same as the name is shown once; a file Slack names nowhere, by its id.
    named = f"    files: pg.log — Postgres log, {ESCAPED_NAME}, F3"
    assert search.render(_response([hit])).splitlines()[3] == named
    assert named in thread.render(_thread_page(hit)).splitlines()
    plain = _hit("T1:C1:2.0", thread_root_id="T1:C1:2.0")
    assert not any("files:" in line for line in search.render(_response([plain])).splitlines())


def test_scopes_and_verify_render_escape_archive_text() -> None:
    scope = ScopeRecord(
        workspace_id="T1",
        workspace_slug="acme",
        workspace_name="Acme",
        channel_id="D1",
        channel_name=f"{HOSTILE_NAME}\n 2. fake line",
        conversation_type="im",
        message_count=1,
        first_ts_us=None,
        last_ts_us=None,
        first_timestamp=None,
        last_timestamp=None,
    )
    page = ScopesResponse(
        scopes=[scope], offset=0, truncated=False, next_cursor=None, artifact_id="b1"
    )
    text = scopes.render(page)
    _assert_escaped(text)
    assert len(text.splitlines()) == 2  # a name cannot start a line of its own
    check = CitationCheck(
        cited=f"[{HOSTILE_NAME}]",
        kind="document_id",
        document_id=None,
        exists=False,
        visible=False,
        active=False,
        unchanged=None,
        problems=["not in the artifact"],
    )
    response = VerificationResponse(
        verdict="unverified",
        citations=[check],
        problems=[],
        uncited_sentences=[HOSTILE_NAME],
        artifact_id="b1",
        cited_at_artifact=None,
    )
    text = verify.render(response)
    _assert_escaped(text)
    assert text.splitlines()[0] == f"[{ESCAPED_NAME}] (document_id): not in the artifact"
    assert text.splitlines()[1] == f"cites nothing: {ESCAPED_NAME}"
