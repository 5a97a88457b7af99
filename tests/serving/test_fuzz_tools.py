"""Every tool's arguments, fuzzed: through the official client, in-process and over HTTP.

Property-based first (hypothesis, derandomized, small): any JSON value for any argument
of any tool gives either a result or one short, clean error line; never the SDK's bare
"Error executing tool", an internal error, pydantic's dump or a leak. Then a short seeded
campaign (benchmarks/fuzz_bench.py, the same generator and checks as the long benchmark)
over real Streamable HTTP with concurrent clients, plus the raw HTTP cases.
"""

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from benchmarks.fuzz_bench import Tally, campaign, discover, healthy, raw_http_cases
from serving.engine import SearchEngine
from serving.metrics import Metrics
from serving.server import build_server

from .test_mcp import ERR_ROOT, http_server

PERMALINK = "https://acme.slack.com/archives/C1/p1709280000000000"
FUZZ = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
texts = st.sampled_from(["null", "true", "[]", "{}", "0", "", "\x00", "x" * 5000]) | st.text(
    max_size=40
)


def argument(*plausible: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(plausible) | texts | json_values


ARGUMENTS = {
    "search_slack": {
        "query": argument("ERR-42", "deploy after:9999-12-31", "database, migration, rollback"),
        "mode": argument("hybrid", "lexical", "semantic"),
        "workspace_ids": argument(["acme"], ["T0ACME"]),
        "channel_ids": argument(["#eng"], ["C1"]),
        "author_ids": argument(["@priya"]),
        "conversation_types": argument(["public"], ["dm", "private"]),
        "start_ts_us": argument(0, 1_709_280_000_000_000, 2**63),
        "end_ts_us": argument(1_709_280_000_000_000, -(2**63) - 1),
        "limit": argument(1, 10, 50),
        "cursor": argument("null", "abc.dé"),
    },
    "get_slack_message": {
        "document_id": argument(ERR_ROOT, PERMALINK, "https://[::1/archives/C1/p1"),
        "context_before": argument(0, 3, 100),
        "context_after": argument(0, 3),
    },
    "get_slack_thread": {
        "thread_id": argument(ERR_ROOT, PERMALINK, "https://acme＃.slack.com/archives/C1/p1234567"),
        "limit": argument(1, 200, 500),
    },
    "list_slack_scopes": {
        "workspace_id": argument("acme", "null"),
        "channel_name": argument("#eng", "eng"),
        "limit": argument(1, 200),
    },
}


def tool_calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    def for_tool(tool: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        fields = ARGUMENTS[tool]
        chosen = st.lists(st.sampled_from(sorted(fields)), unique=True)
        return chosen.flatmap(
            lambda names: st.fixed_dictionaries({name: fields[name] for name in names})
        ).map(lambda arguments: (tool, arguments))

    return st.sampled_from(sorted(ARGUMENTS)).flatmap(for_tool)


@pytest.fixture
def in_process(engine: SearchEngine) -> Iterator[Any]:
    """Call a tool through the official client connected to the server object in-process."""
    server = build_server(engine, Metrics())

    def call(tool: str, arguments: dict[str, Any]) -> Any:
        async def main() -> Any:
            async with Client(server) as client:
                return await client.call_tool(tool, arguments)

        return anyio.run(main)

    yield call


@FUZZ
@given(tool_calls())
def test_any_arguments_give_a_result_or_one_clean_line(in_process: Any, drawn: Any) -> None:
    tool, arguments = drawn
    tally = Tally()
    tally.record(tool, arguments, in_process(tool, arguments), seconds=0.0)
    assert tally.failures() == dict.fromkeys(tally.failures(), 0), tally.report()["samples"]


def test_short_seeded_campaign_over_http(engine: SearchEngine, published: Any) -> None:
    tally = Tally()
    with http_server(published, engine) as url:
        known = anyio.run(discover, url)
        assert known.document_ids and known.cursors and known.permalinks

        async def run() -> None:
            await campaign(url, known, calls=160, clients=4, seed=3, tally=tally)

        anyio.run(run)
        raw_http_cases(url, tally)
        assert healthy(url)
    failures = tally.failures()
    failures.pop("over_5_s")  # depends on the host's load; the benchmark reports it
    assert failures == dict.fromkeys(failures, 0), tally.report()["samples"]
    assert tally.calls == 160 and 0 < tally.ok < tally.calls
    assert tally.http_statuses[413] >= 1 and set(tally.http_statuses) <= {0, *range(200, 500)}
