"""The MCP server through the official client, over real Streamable HTTP and stdio."""

import json
import logging
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError

from serving import server
from serving.budget import BudgetExceeded, Deadline
from serving.engine import SearchEngine
from serving.fusion import FusionConfig
from serving.metrics import Metrics
from serving.models import SearchRequest
from serving.server import build_http_app, rebinding_guard
from serving.tools import ToolRunner
from slackquery.artifacts.files import build_time
from slackquery.artifacts.publish import publish
from slackquery.settings import Settings
from tests.loopback import serve

from .conftest import Pipeline, install

TOOLS = {
    "search_slack",
    "get_slack_message",
    "get_slack_thread",
    "list_slack_scopes",
    "answer_slack_question",
    "verify_citations",
}
ROOT = Path(__file__).resolve().parents[2]
ERR_ROOT = "T0ACME:C1:1709280000.000000"  # root of the five-message ERR-42 thread
LONG_MESSAGE = "T0ACME:C1:1709355600.000021"  # longer than the response cap; no replies
# How the guide, search_slack's description and docs/mcp.md word the date operators.
EXCLUSIVE_DAYS = "before: and after: exclude the day they name"


def prose(text: str | None) -> str:
    """Text as a reader takes it: one line, code marks dropped."""
    return " ".join((text or "").replace("`", "").split())


@contextmanager
def http_server(settings: Settings, engine: SearchEngine | None = None) -> Iterator[str]:
    """The MCP HTTP app (lifespan on) served on loopback; yields the base URL."""
    with serve(build_http_app(settings, engine), lifespan="on") as url:
        yield url


def run_client(url: str, body: Callable[[Client], Awaitable[Any]], token: str | None = None) -> Any:
    """Connect the official client to `url`/mcp and run `body` with it."""

    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport) as client:
                return await body(client)

    return anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        return "ERROR: " + " ".join(getattr(block, "text", "") for block in result.content)
    return result.structured_content


@pytest.fixture
def served(engine: SearchEngine, published: Settings) -> Iterator[str]:
    with http_server(published, engine) as url:
        yield url


def test_tool_list_guide_and_instructions(served: str) -> None:
    async def body(client: Client) -> None:
        tools = (await client.list_tools()).tools
        assert {tool.name for tool in tools} == TOOLS
        for tool in tools:
            assert tool.description and len(tool.description) > 80
            assert tool.output_schema is not None
        assert "hybrid" in (client.instructions or "")
        guide = await client.read_resource("slackquery://guide")
        assert "Zero results do not prove" in guide.contents[0].text
        # A client that never fetches the answer_from_slack prompt still learns which tool
        # answers a question and to verify citations, and that date operators exclude.
        instructions = prose(client.instructions)
        assert prose(guide.contents[0].text) == instructions
        assert "A question to answer from Slack: answer_slack_question" in instructions
        assert "Before replying with citations: verify_citations" in instructions
        assert EXCLUSIVE_DAYS in instructions and "start_ts_us/end_ts_us, inclusive" in instructions
        search = prose(next(tool for tool in tools if tool.name == "search_slack").description)
        assert EXCLUSIVE_DAYS in search and "use answer_slack_question instead" in search
        assert "Start here for any question" not in search

    run_client(served, body)


def test_each_tool_over_http(served: str) -> None:
    async def body(client: Client) -> None:
        found = await call(client, "search_slack", query="ERR-42 in:#eng", limit=5)
        assert found["route"] == "exact"
        hit = found["results"][0]
        assert {"document_id", "source_message_id", "permalink", "fused_score"} <= set(hit)
        assert hit["lexical"]["rank"] >= 1
        message = await call(client, "get_slack_message", document_id=hit["permalink"])
        assert message["messages"][0]["document_id"] == hit["document_id"]
        # Citations copied from an answer, as verify_citations reads them.
        for cited in (
            f"[{hit['document_id']}]",
            f"<{hit['permalink']}>",
            f" <{hit['permalink']}|the message> ",
        ):
            as_cited = await call(client, "get_slack_message", document_id=cited)
            assert as_cited["messages"][0]["document_id"] == hit["document_id"], cited
        thread = await call(client, "get_slack_thread", thread_id=ERR_ROOT)
        assert len(thread["messages"]) == 5 and thread["next_cursor"] is None
        assert thread["notes"] == []
        cited_thread = await call(client, "get_slack_thread", thread_id=f"[{ERR_ROOT}]")
        assert cited_thread["messages"] == thread["messages"]
        head = await call(client, "get_slack_thread", thread_id=ERR_ROOT, limit=3)
        tail = await call(
            client, "get_slack_thread", thread_id=ERR_ROOT, limit=3, cursor=head["next_cursor"]
        )
        assert head["messages"] + tail["messages"] == thread["messages"]
        assert (tail["offset"], tail["truncated"]) == (3, False)
        scopes = await call(client, "list_slack_scopes", workspace_id="acme")
        assert {scope["channel_name"] for scope in scopes["scopes"]} >= {"eng", "support"}
        assert scopes["next_cursor"] is None
        page = await call(client, "list_slack_scopes", workspace_id="acme", limit=2)
        rest = await call(
            client, "list_slack_scopes", workspace_id="acme", cursor=page["next_cursor"]
        )
        assert page["scopes"] + rest["scopes"] == scopes["scopes"]
        long_text = await call(client, "get_slack_message", document_id=LONG_MESSAGE)
        assert long_text["messages"][0]["text_truncated"] is True
        assert len(long_text["messages"][0]["text"]) < 4100
        # A message with no replies: its thread_root_id is its own id, read as a thread.
        root_id = long_text["messages"][0]["thread_root_id"]
        alone = await call(client, "get_slack_thread", thread_id=root_id)
        assert [item["document_id"] for item in alone["messages"]] == [LONG_MESSAGE]
        assert (alone["thread_id"], alone["next_cursor"], alone["truncated"]) == (
            LONG_MESSAGE,
            None,
            False,
        )
        assert "this message has no replies" in alone["notes"][0]

    run_client(served, body)


def test_the_text_copy_of_a_result_is_its_structured_content_as_compact_json(
    served: str,
) -> None:
    # Many clients hand the model the text copy: the SDK's indented one was ~20% longer.
    async def body(client: Client) -> list[Any]:
        return [
            await client.call_tool("search_slack", {"query": "deploy", "limit": 5}),
            await client.call_tool("get_slack_thread", {"thread_id": ERR_ROOT}),
            await client.call_tool("answer_slack_question", {"question": "what broke ERR-42?"}),
        ]

    for result in run_client(served, body):
        (text,) = result.content
        compact = json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
        assert text.text == compact


def test_pagination_and_cursor_tampering_over_http(served: str) -> None:
    async def body(client: Client) -> None:
        seen: list[str] = []
        cursor = None
        cursors = []
        while True:
            page = await call(
                client, "search_slack", query="the", mode="lexical", limit=4, cursor=cursor
            )
            seen.extend(hit["document_id"] for hit in page["results"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
            cursors.append(cursor)
        assert len(seen) == len(set(seen)) > 8
        full = await call(client, "search_slack", query="the", mode="lexical", limit=50)
        assert seen == [hit["document_id"] for hit in full["results"]]
        tampered = cursors[0][:-2] + ("AA" if not cursors[0].endswith("AA") else "BB")
        for bad, expected in (
            (tampered, "signature"),
            ("garbage", "cursor"),
            (cursors[0], "another query"),
        ):
            query = "the" if bad is not cursors[0] else "other"
            error = await call(
                client, "search_slack", query=query, mode="lexical", limit=4, cursor=bad
            )
            assert error.startswith("ERROR") and expected in error
            assert "without a cursor" in error and "Traceback" not in error

    run_client(served, body)


def test_bad_inputs_are_clear_tool_errors(served: str) -> None:
    injection = "x'); DROP TABLE search_documents; --"
    cases = [
        ({"query": "deploy", "channel_ids": [f"C{i}" for i in range(101)]}, "too many"),
        ({"query": "deploy", "limit": 51}, "limit"),
        ({"query": "deploy", "start_ts_us": 2, "end_ts_us": 1}, "start_ts_us"),
        ({"query": ""}, "searchable"),
        ({"query": "?!;..."}, "searchable"),
        ({"query": "deploy", "workspace_ids": ["W1' OR true --"]}, "unknown workspace"),
        ({"query": "deploy", "channel_ids": [injection]}, "unknown channel"),
        ({"query": "deploy", "author_ids": ["U1' OR 1=1 --"]}, "unknown author"),
        ({"query": "deploy", "conversation_types": ["dm' --"]}, "conversation_types"),
        ({"query": "deploy", "mode": "sql"}, "mode"),
        # Ignoring a misspelt filter would search everything as if it had applied.
        ({"query": "deploy", "channel": "#eng"}, "unknown argument 'channel' (it takes query,"),
    ]

    async def body(client: Client) -> None:
        for arguments, expected in cases:
            error = await call(client, "search_slack", **arguments)
            assert isinstance(error, str) and expected in error, (arguments, error)
            assert "Traceback" not in error
        for tool, arguments in (
            ("get_slack_message", {"document_id": "T0ACME:C1:404"}),
            ("get_slack_message", {"document_id": injection}),
            ("get_slack_message", {"document_id": ERR_ROOT, "context_after": 101}),
            ("get_slack_thread", {"thread_id": "W1' OR true --"}),
            ("get_slack_thread", {"thread_id": ERR_ROOT, "limit": 501}),
            ("list_slack_scopes", {"channel_name": injection}),
        ):
            error = await call(client, tool, **arguments)
            assert isinstance(error, str) and error.startswith("ERROR"), (tool, error)
        # Injection text is searched as words and the artifact is untouched.
        found = await call(client, "search_slack", query=injection, mode="lexical")
        assert found["results"][0]["document_id"] == "T0ACME:C1:1709395200.000032"
        emoji = await call(client, "search_slack", query="🎉", mode="semantic", limit=3)
        assert emoji["results"]
        cyrillic = await call(client, "search_slack", query="база данных", limit=3)
        assert cyrillic["results"][0]["document_id"] == "T0ACME:C1:1709312400.000009"

    run_client(served, body)


def test_determinism_and_metrics(served: str, pipeline: Pipeline) -> None:
    async def body(client: Client) -> list[Any]:
        first = await call(client, "search_slack", query="database problems", limit=10)
        second = await call(client, "search_slack", query="database problems", limit=10)
        # Refused before the tool runs, and counted all the same.
        assert "mode" in await call(client, "search_slack", query="x", mode="bogus")
        assert "unknown argument" in await call(client, "search_slack", query="x", sql="1")
        assert "ERROR" in await call(client, "drop_tables")
        return [first, second]

    first, second = run_client(served, body)
    first.pop("timings_ms")
    second.pop("timings_ms")
    assert first == second
    metrics = httpx.get(f"{served}/metrics").text
    assert 'slackquery_requests_total{tool="search_slack",mode="hybrid"} 2' in metrics
    assert 'slackquery_requests_total{tool="search_slack",mode="invalid"} 2' in metrics
    assert 'slackquery_requests_total{tool="unknown",mode="invalid"} 1' in metrics
    assert 'slackquery_errors_total{tool="search_slack",mode="invalid",kind="refused"} 2' in (
        metrics
    )
    assert f'slackquery_artifact_info{{artifact_id="{pipeline.first_build}"}} 1' in metrics
    assert "slackquery_request_seconds_bucket" in metrics


def test_a_server_fault_is_one_fixed_line_for_requesters_and_logged_once(
    settings: Settings, pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    # The operator's reason names the artifact folder; requesters are not trusted with it.
    caplog.set_level(logging.INFO, logger="serving.access_log")
    with http_server(settings) as url:

        async def searches(client: Client) -> list[Any]:
            return [await call(client, "search_slack", query="deploy") for _ in range(2)]

        assert run_client(url, searches) == ["ERROR: no servable artifact; see the server log"] * 2
        install(settings, pipeline)
        assert run_client(url, searches)[0]["results"]
        metrics = httpx.get(f"{url}/metrics").text
    (fault,) = [record.getMessage() for record in caplog.records if record.name == "serving.tools"]
    assert fault.startswith("search_slack cannot answer: no published search artifact at ")
    assert str(settings.artifact_path) in fault
    accessed = [record.getMessage() for record in caplog.records if "access_log" in record.name]
    assert [line.rsplit(" ", 2)[0] for line in accessed] == [
        "operator search_slack mode=hybrid unavailable",
        "operator search_slack mode=hybrid unavailable",
        "operator search_slack mode=hybrid ok",
        "operator search_slack mode=hybrid ok",
    ]
    assert 'slackquery_errors_total{tool="search_slack",mode="hybrid",kind="unavailable"} 2' in (
        metrics
    )
    built = build_time(pipeline.first_build)
    assert built is not None
    assert f"slackquery_artifact_built_timestamp_seconds {built.timestamp():.0f}\n" in metrics


def test_a_misconfigured_embedder_is_the_servers_fault(published: Settings) -> None:
    misconfigured = published.model_copy(update={"embedding_model_revision": "v999"})
    with http_server(misconfigured) as url:

        async def searches(client: Client) -> list[Any]:
            return [
                await call(client, "search_slack", query="deploy"),
                await call(client, "search_slack", query="deploy", mode="lexical"),
            ]

        hybrid, lexical = run_client(url, searches)
        unready = httpx.get(f"{url}/readyz").json()["error"]
        metrics = httpx.get(f"{url}/metrics").text
    reason = "the embedding model is misconfigured, so hybrid and semantic search fail"
    assert hybrid == f"ERROR: {reason}; see the server log" and lexical["results"]
    assert unready == f"{reason}; see the server log"
    assert 'kind="unavailable"} 1' in metrics


def test_publish_during_queries(served: str, publishable: Settings, pipeline: Pipeline) -> None:
    artifacts: list[str] = []
    errors: list[str] = []

    async def body(client: Client) -> None:
        async def one(index: int) -> None:
            result = await call(client, "search_slack", query=f"deploy {index}", mode="lexical")
            if isinstance(result, str):
                errors.append(result)
            else:
                artifacts.append(result["artifact_id"])

        async with anyio.create_task_group() as group:
            for index in range(12):
                group.start_soon(one, index)
                if index == 5:
                    await anyio.to_thread.run_sync(publish, publishable, pipeline.second_build)
        after = await call(client, "search_slack", query="zebra", mode="lexical")
        assert after["artifact_id"] == pipeline.second_build and after["results"]

    run_client(served, body)
    assert errors == []
    assert len(artifacts) == 12 and set(artifacts) <= {pipeline.first_build, pipeline.second_build}


def test_health_readiness_auth_and_body_cap(settings: Settings, pipeline: Pipeline) -> None:
    secured = settings.model_copy(update={"serve_token": "s3cret-token-value"})
    with http_server(secured) as url:
        assert httpx.get(f"{url}/healthz").json() == {"healthy": True}
        unready = httpx.get(f"{url}/readyz")
        assert unready.status_code == 503 and unready.json()["ready"] is False
        assert str(settings.home) not in unready.text  # public: no paths
        denied = httpx.post(f"{url}/mcp", json={})
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"].startswith("Bearer")
        wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        install(settings, pipeline)
        ready = httpx.get(f"{url}/readyz").json()
        assert ready["ready"] is True and ready["artifact_id"] == pipeline.first_build
        assert "documents" not in ready and "messages" not in ready  # public: no archive size
        big = httpx.post(
            f"{url}/mcp",
            content=b"x" * (secured.serve_max_request_bytes + 1),
            headers={"Authorization": "Bearer s3cret-token-value"},
        )
        assert big.status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
            for _ in range(32):
                yield b"x" * 65536

        streamed = httpx.post(
            f"{url}/mcp", content=chunks(), headers={"Authorization": "Bearer s3cret-token-value"}
        )
        assert streamed.status_code == 413 and "over 1048576 bytes" in streamed.text

        async def body(client: Client) -> Any:
            return await call(client, "list_slack_scopes")

        assert run_client(url, body, token="s3cret-token-value")["scopes"]


@pytest.mark.parametrize(
    "body",
    [
        b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]',
        b"null",
        b'{"jsonrpc": "2.0"}',
        # The SDK took these as notifications and dropped them: their client waited forever.
        b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}',
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}',
        b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}',
    ],
    ids=["batch", "null", "no-method", "id-null", "id-float", "id-bool"],
)
def test_a_body_that_is_not_one_json_rpc_message_is_an_invalid_request(
    served: str, body: bytes
) -> None:
    headers = {"Content-Type": "application/json"}
    response = httpx.post(f"{served}/mcp", content=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600  # JSON-RPC's "invalid request"
    assert "send one JSON-RPC object (batches are not supported)" in error["message"]


@pytest.mark.parametrize("bound_to", ["127.0.0.1", "127.0.0.2"])
def test_a_loopback_server_answers_only_requests_addressed_to_loopback(
    engine: SearchEngine, published: Settings, bound_to: str
) -> None:
    # With no token on loopback, a web page that rebinds its own domain name to 127.0.0.1
    # would otherwise read the archive through the visitor's browser (DNS rebinding). The
    # SDK guarded 127.0.0.1, localhost and ::1 only; the served URL is 127.0.0.1 either way.
    settings = published.model_copy(update={"serve_host": bound_to})
    with http_server(settings, engine) as url:

        def tools_list(**headers: str) -> httpx.Response:
            body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
            sent = {"Content-Type": "application/json", "Accept": "application/json", **headers}
            return httpx.post(f"{url}/mcp", content=body, headers=sent)

        port = url.rsplit(":", 1)[1]
        assert tools_list(Host=f"attacker.example:{port}").status_code == 421
        assert tools_list(Origin="http://attacker.example").status_code == 403
        assert tools_list(Host=f"{bound_to}:{port}").status_code == 200
        assert tools_list(Host="localhost").status_code == 200  # as sent for port 80
        assert tools_list(Origin="https://127.0.0.1").status_code == 200
        assert tools_list(Host="localhost.attacker.example").status_code == 421
        answered = tools_list(Origin=f"http://localhost:{port}")
        assert answered.status_code == 200 and answered.json()["result"]["tools"]
        # The SDK guards /mcp alone; what was asked, and of which build, is not public.
        metrics = f"{url}/metrics"
        assert httpx.get(metrics, headers={"Host": f"attacker.example:{port}"}).status_code == 421
        assert httpx.get(metrics, headers={"Origin": "http://attacker.example"}).status_code == 403
        assert "slackquery_requests_total" in httpx.get(metrics).text


def test_beyond_loopback_no_rebinding_guard() -> None:
    assert rebinding_guard("0.0.0.0") is None  # the names are a proxy's; a token guards it


def _readiness_and_searches(settings: Settings) -> tuple[httpx.Response, Any, Any]:
    """`/readyz`, then a hybrid and a lexical search, from a server run with `settings`."""
    engine = SearchEngine(settings)
    try:
        with http_server(settings, engine) as url:
            readiness = httpx.get(f"{url}/readyz")

            async def body(client: Client) -> tuple[Any, Any]:
                hybrid = await call(client, "search_slack", query="deploy")
                lexical = await call(client, "search_slack", query="deploy", mode="lexical")
                return hybrid, lexical

            hybrid, lexical = run_client(url, body)
    finally:
        engine.close()
    return readiness, hybrid, lexical


def test_not_ready_while_the_configured_model_is_not_the_artifacts(
    published: Settings, caplog: Any
) -> None:
    another = published.model_copy(update={"embedding_model": "ort-int8/multilingual-e5-small-q4"})
    readiness, hybrid, lexical = _readiness_and_searches(another)
    assert readiness.status_code == 503
    assert readiness.json() == {
        "ready": False,
        "error": "embedding generation mismatch between the configured model and the artifact, "
        "so hybrid and semantic search fail; see the server log",
    }
    assert str(published.home) not in readiness.text  # public: the details go to the log
    logged = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("not ready: embedding generation mismatch") for line in logged)
    # Readiness answers what searches find: hybrid fails, lexical still works.
    assert "embedding generation mismatch" in hybrid and lexical["results"]


def test_readiness_waits_a_bounded_time_on_an_endpoint_that_never_answers(
    published: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "READY_TIMEOUT_S", 0.3)
    with socket.socket() as silent:  # accepts connections (its backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        hanging = published.model_copy(
            update={
                "embedding_transport": "ollama",
                "embedding_url": endpoint,
                "embedding_timeout_s": 5.0,
            }
        )
        engine = SearchEngine(hanging)
        try:
            with http_server(hanging, engine) as url:
                probes = [httpx.get(f"{url}/readyz", timeout=10) for _ in range(3)]
                checking = [t for t in threading.enumerate() if t.name == "readiness"]
        finally:
            engine.close()
    for probe in probes:
        assert probe.status_code == 503
        assert probe.json() == {"ready": False, "error": "the readiness check has not finished"}
    assert len(checking) == 1  # the probes shared the one check still waiting


def test_not_ready_while_the_embedding_endpoint_fails_validation(published: Settings) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        down = published.model_copy(
            update={"embedding_transport": "ollama", "embedding_url": endpoint}
        )
        readiness, hybrid, lexical = _readiness_and_searches(down)
    assert readiness.status_code == 503
    assert readiness.json()["error"] == (
        "the embedding endpoint failed validation, so hybrid and semantic search fail; "
        "see the server log"
    )
    assert endpoint not in readiness.text
    assert "failed validation" in hybrid and lexical["results"]


def test_stdio_transport(published: Settings) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(published.home)
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "serving", "--stdio"], env=env, cwd=str(ROOT)
    )

    async def main() -> tuple[set[str], Any]:
        async with Client(parameters) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            found = await call(client, "search_slack", query="postgres password 28P01", limit=3)
            return tools, found

    tools, found = anyio.run(main)
    assert tools == TOOLS
    assert found["results"][0]["channel_name"] == "support"
    assert found["results"][0]["semantic"] is not None


def test_stdio_answers_a_request_its_parser_refuses(published: Settings) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(published.home)
    command = [sys.executable, "-m", "serving", "--stdio"]
    server = subprocess.Popen(
        command, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert server.stdin is not None and server.stdout is not None

    def ask(message: dict[str, Any], *, raw: str | None = None) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write((raw or json.dumps(message)) + "\n")
        server.stdin.flush()
        replied, _, _ = select.select([server.stdout], [], [], 60)  # fails, never hangs
        assert replied, "no reply within 60 s"
        return json.loads(server.stdout.readline())

    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        hello["clientInfo"] = {"name": "test", "version": "0"}
        assert "result" in ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        server.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        # A lone surrogate escape: JSON to Python, refused by the SDK's parser.
        broken = (
            '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
            '"search_slack", "arguments": {"query": "the \\ud800 deploy"}}}'
        )
        refused = ask({}, raw=broken)
        assert refused["id"] == 7 and refused["error"]["code"] == -32700
        assert "a lone surrogate" in refused["error"]["message"]
        # Nested deeper than the SDK's parser takes: answered the same way, not a surrogate.
        deep = '{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": %s}}'
        refused = ask({}, raw=deep % ("[" * 300 + "]" * 300))
        assert refused["id"] == 9 and "nesting deeper" in refused["error"]["message"]
        # Deeper than Python's parser takes: no id to answer, but the server lives on (it
        # exited on a RecursionError).
        server.stdin.write(deep % ("[" * 5000 + "]" * 5000) + "\n")
        call = {"name": "search_slack", "arguments": {"query": "deploy"}}
        after = ask({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": call})
        assert after["id"] == 8 and not after["result"]["isError"]
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def test_stdio_answers_the_requests_read_before_its_input_ended(published: Settings) -> None:
    # A script piping `initialize` and a call, then closing stdin, got only the first
    # answer: the SDK cancelled the call still running when the input ended.
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(published.home)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    hello["clientInfo"] = {"name": "test", "version": "0"}
    call = {"name": "search_slack", "arguments": {"query": "deploy", "limit": 1}}
    piped = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "serving", "--stdio"],
        input="".join(json.dumps(message) + "\n" for message in piped),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [reply["id"] for reply in replies] == [0, 1] and done.returncode == 0
    assert not replies[1]["result"]["isError"]


def test_hostile_inputs_get_one_short_line_each(served: str) -> None:
    cases = [
        ("search_slack", {"query": "deploy", "cursor": "null"}, "not a cursor"),
        ("search_slack", {"query": "deploy", "cursor": "abc.dé"}, "not a cursor"),
        ("search_slack", {"query": "deploy", "limit": "abc"}, "limit: Input should be"),
        ("search_slack", {"query": "deploy", "limit": True}, "limit: Input should be a valid int"),
        ("search_slack", {"query": "deploy", "limit": "5"}, "limit: Input should be a valid int"),
        ("get_slack_thread", {"thread_id": "x", "limit": 2.0}, "limit: Input should be a valid"),
        ("search_slack", {"query": "deploy", "mode": "sql"}, "mode: Input should be"),
        ("search_slack", {"query": "deploy", "start_ts_us": 2**64}, "start_ts_us"),
        ("answer_slack_question", {"question": "deploy", "end_ts_us": 2**63}, "end_ts_us: Input"),
        ("search_slack", {"query": "deploy", "channel_ids": ["c" * 100_097]}, "characters"),
        ("search_slack", {"query": "x\x00" * 1500}, "maximum is 2000"),
        ("search_slack", {"query": "is:\x00" + "y" * 1500}, "is:\\x00yyy"),
        ("search_slack", {}, "query: Field required"),
        ("list_slack_scopes", {"workspace_id": "null"}, "unknown workspace"),
        ("get_slack_message", {"document_id": "https://acme＃.slack.com/archives/C1/p1234567890"},
         "not a Slack message permalink"),
        ("get_slack_thread", {"thread_id": "https://[::1/archives/C1/p1234567890"},
         "not a Slack message permalink"),
        ("get_slack_message", {"document_id": "https://[zzz]/archives/C1/p1234567890"},
         "not a Slack message permalink"),
        ("no_such_tool", {}, "Unknown tool"),
    ]  # fmt: skip

    async def body(client: Client) -> None:
        for tool, arguments, expected in cases:
            error = await call(client, tool, **arguments)
            assert isinstance(error, str) and expected in error, (tool, error[:400])
            line = error.removeprefix("ERROR: ")
            assert len(line) <= 300 and line.isprintable(), line
            for marker in ("Error executing tool", "pydantic", "validation error", "Traceback"):
                assert marker not in line
        for query in ("deploy after:9999-12-31", "deploy on:9999-12-31", "deploy during:9999"):
            found = await call(client, "search_slack", query=query, mode="lexical")
            assert found["results"] == [], query
        error = await call(client, "search_slack", query="deploy during:0000-01")
        assert "out of range" in error

    run_client(served, body)


def test_an_unexpected_failure_names_a_request_id_that_the_log_has(
    engine: SearchEngine, published: Settings, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk on fire at /secret/path.duckdb")

    monkeypatch.setattr(engine, "get_thread", broken)  # simulates a fault inside the engine
    with http_server(published, engine) as url:

        async def body(client: Client) -> str:
            return await call(client, "get_slack_thread", thread_id=ERR_ROOT)

        error = run_client(url, body)
    assert error.startswith("ERROR: internal error in get_slack_thread (request id ")
    assert "secret" not in error and "fire" not in error
    request_id = error.split("request id ")[1].split(")")[0]
    logged = [record for record in caplog.records if request_id in record.getMessage()]
    assert logged and logged[0].exc_info is not None


def test_tool_descriptions_state_the_enforced_limits(published: Settings) -> None:
    narrow = published.model_copy(
        update={
            "search_max_results": 15,
            "search_max_query_chars": 123,
            "serve_max_response_chars": 8_000,
        }
    )
    engine = SearchEngine(narrow)
    try:
        with http_server(narrow, engine) as url:

            async def body(client: Client) -> tuple[list[Any], Any, Any, Any, Any]:
                listed = (await client.list_tools()).tools
                over = await call(client, "search_slack", query="deploy", mode="lexical", limit=16)
                at = await call(client, "search_slack", query="deploy", mode="lexical", limit=15)
                long = await call(client, "search_slack", query="d" * 124, mode="lexical", limit=5)
                wide = await call(
                    client,
                    "get_slack_message",
                    document_id=LONG_MESSAGE,
                    context_before=50,
                    context_after=50,
                )
                return listed, over, at, long, wide

            listed, over, at, long, wide = run_client(url, body)
    finally:
        engine.close()
    tools = {tool.name: tool.description or "" for tool in listed}
    schemas = {tool.name: tool.input_schema["properties"] for tool in listed}
    # The input schemas state the same limits, for a client that checks before it calls.
    assert schemas["search_slack"]["limit"] | {"default": 10} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 15,
        "default": 10,
        "title": "Limit",
        "description": "Results per page, 1-15. Default: 10.",
    }
    # Every parameter says what it takes beside it, and each schema is titled by its tool
    # (not by the Python function behind it).
    for tool in listed:
        assert tool.input_schema["title"] == f"{tool.name}Arguments"
        for name, parameter in tool.input_schema["properties"].items():
            assert parameter.get("description"), (tool.name, name)
    assert "inclusive" in schemas["search_slack"]["start_ts_us"]["description"]
    assert "microseconds" in schemas["answer_slack_question"]["end_ts_us"]["description"]
    assert "6,150 characters" in schemas["verify_citations"]["text"]["description"]
    assert schemas["search_slack"]["query"]["maxLength"] == 123
    assert schemas["answer_slack_question"]["max_evidence"]["maximum"] == 15
    assert schemas["answer_slack_question"]["question"]["maxLength"] == 123
    assert schemas["get_slack_thread"]["limit"]["maximum"] == 500
    assert schemas["get_slack_message"]["context_after"]["maximum"] == 100
    assert schemas["list_slack_scopes"]["limit"]["minimum"] == 1
    listed_values = schemas["search_slack"]["channel_ids"]["anyOf"][0]
    assert listed_values["maxItems"] == narrow.search_max_filter_values
    assert listed_values["items"]["maxLength"] == 200
    assert schemas["verify_citations"]["text"]["maxLength"] == 123 * 50
    # The channel's messages would take more than the response budget, which counts the
    # records' compact JSON.
    compact = json.dumps(wide["messages"], separators=(",", ":"), ensure_ascii=False)
    assert len(compact) <= 8_000
    assert "SLACKQUERY_SERVE_MAX_RESPONSE_CHARS" in wide["notes"][0]
    assert all("8,000 characters" in " ".join(tools[name].split()) for name in TOOLS)
    search = tools["search_slack"]
    assert "1-15 results" in search and "at most 123 chars" in search
    assert "parts of a multi-part question" not in search  # the question-part arm is off
    assert "ranks that scope's messages up" in search
    assert "{" not in "".join(tools.values())
    assert "between 1 and 15" in over and isinstance(at, dict) and "maximum is 123" in long
    assert (
        "1-500 messages" in tools["get_slack_thread"]
        and "at most 100" in tools["get_slack_message"]
    )
    answer = tools["answer_slack_question"]
    assert "1-123 chars" in answer and "1-15 messages" in answer


def test_calls_over_the_in_flight_cap_are_busy_at_once(
    published: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    single = published.model_copy(update={"serve_max_in_flight": 1})
    engine = SearchEngine(single)
    entered, release = threading.Event(), threading.Event()
    original = engine.get_thread

    def stalled(*args: Any, **kwargs: Any) -> Any:  # one slow call holding the only slot
        entered.set()
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "get_thread", stalled)
    with http_server(single, engine) as url:

        async def body(client: Client) -> tuple[Any, Any, Any]:
            first: list[Any] = []

            async def slow_call() -> None:
                first.append(await call(client, "get_slack_thread", thread_id=ERR_ROOT))

            async with anyio.create_task_group() as group:
                group.start_soon(slow_call)
                await anyio.to_thread.run_sync(entered.wait, 30)
                busy = await call(client, "list_slack_scopes")
                release.set()
            return first[0], busy, await call(client, "list_slack_scopes")

        slow, busy, later = run_client(url, body)
    engine.close()
    assert len(slow["messages"]) == 5
    assert busy.startswith("ERROR: server busy: 1 call(s) running already")
    assert later["scopes"]


def test_a_call_past_its_budget_ends_with_a_clear_error(settings: Settings) -> None:
    now = [100.0]
    budgeted = settings.model_copy(update={"serve_request_budget_s": 2.0})
    runner = ToolRunner(budgeted, Metrics(), clock=lambda: now[0])

    def ranking(deadline: Deadline) -> None:
        now[0] += 2.5  # the first stage took 2.5 s
        deadline.check("ranking")

    with pytest.raises(ToolError, match=r"ran past its 2 s time budget before ranking"):
        anyio.run(runner.run, "search_slack", "hybrid", ranking)
    assert runner.in_flight == 0


def test_search_checks_its_deadline_before_each_arm(engine: SearchEngine) -> None:
    readings = iter([0.0, 0.0])  # made, first arm's check; every later reading is 99 s on

    def clock() -> float:
        return next(readings, 99.0)

    request = SearchRequest(query="database migration", mode="hybrid")
    with pytest.raises(BudgetExceeded, match=r"time budget before the \w+ arm"):
        engine.search(request, deadline=Deadline(5.0, clock))
    assert engine.search(request, deadline=Deadline(5.0)).results


def test_long_lists_of_question_parts_are_capped_with_a_note(engine: SearchEngine) -> None:
    question = ", ".join(f"what about deploy step {index}" for index in range(20))
    with_parts = FusionConfig(disabled_arms=frozenset())  # the question-part arm is off by default
    found = engine.search(SearchRequest(query=question, mode="hybrid", limit=3), with_parts)
    assert "only the first 8 question parts were searched on their own (12 dropped)" in found.notes
    searched = next(note for note in found.notes if note.startswith("searched each part: "))
    assert searched.count(" | ") == 7
