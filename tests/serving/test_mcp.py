"""The MCP server through the official client, over real Streamable HTTP and stdio."""

import os
import sys
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

from serving.engine import SearchEngine
from serving.server import build_http_app
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
LONG_MESSAGE = "T0ACME:C1:1709355600.000021"  # longer than the response cap


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
        thread = await call(client, "get_slack_thread", thread_id=ERR_ROOT)
        assert len(thread["messages"]) == 5
        scopes = await call(client, "list_slack_scopes", workspace_id="acme")
        assert {scope["channel_name"] for scope in scopes["scopes"]} >= {"eng", "support"}
        long_text = await call(client, "get_slack_message", document_id=LONG_MESSAGE)
        assert long_text["messages"][0]["text_truncated"] is True
        assert len(long_text["messages"][0]["text"]) < 4100

    run_client(served, body)


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
            (cursors[0], "different query"),
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
        return [first, second]

    first, second = run_client(served, body)
    first.pop("timings_ms")
    second.pop("timings_ms")
    assert first == second
    metrics = httpx.get(f"{served}/metrics").text
    assert 'slackquery_requests_total{tool="search_slack",mode="hybrid"} 2' in metrics
    assert f'slackquery_artifact_info{{artifact_id="{pipeline.first_build}"}} 1' in metrics
    assert "slackquery_request_seconds_bucket" in metrics


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
        denied = httpx.post(f"{url}/mcp", json={})
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"].startswith("Bearer")
        wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        install(settings, pipeline)
        ready = httpx.get(f"{url}/readyz").json()
        assert ready["ready"] is True and ready["artifact_id"] == pipeline.first_build
        big = httpx.post(
            f"{url}/mcp",
            content=b"x" * (secured.serve_max_request_bytes + 1),
            headers={"Authorization": "Bearer s3cret-token-value"},
        )
        assert big.status_code == 413

        async def body(client: Client) -> Any:
            return await call(client, "list_slack_scopes")

        assert run_client(url, body, token="s3cret-token-value")["scopes"]


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
