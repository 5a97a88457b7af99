"""Hostile-input campaign against a served artifact, through the official MCP client.

Each call is drawn from a seeded generator (`CallGenerator`): every tool, each argument
plausible (ids, permalinks, names, cursors taken from the served artifact itself),
hostile (edge dates, fullwidth or broken URLs, 100,000-character strings, control
characters, JSON-looking text such as "null", SQL) or of the wrong JSON type, plus
missing and unknown arguments, unknown tools, mutated cursors and 150-part questions.
Then raw HTTP cases (`raw_http_cases`): oversized bodies with and without
Content-Length, broken JSON-RPC, lone surrogates, wrong methods and headers.

What counts against the server (`Tally.failures`): an unhandled error (the SDK's bare
"Error executing tool" or our "internal error ... request id"), an error that is not one
short line, a leak (traceback, source path, SQL, pydantic text not echoed from the
input), a client time-out, a response over 5 s, an HTTP 5xx, an unhealthy server after.

`tests/serving/test_fuzz_tools.py` runs a short seeded campaign in `make test`; this
command runs the long one against a separate `python -m serving` process on the sample
workspace, in rounds of concurrent clients, and reports resident memory after each round:

    python -m benchmarks.fuzz_bench [--messages 5000] [--rounds 10] [--clients 8] [--calls 130]
"""

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SLOW_S = 5.0
MAX_ERROR_CHARS = 300
CLIENT_TIMEOUT_S = 30.0  # a call still unanswered then counts as a time-out
# The transport's own limit is longer, so a slow call ends as our time-out, not as an
# exception that takes the whole client session down.
HTTP_TIMEOUT_S = 4 * CLIENT_TIMEOUT_S
LEAK = re.compile(
    r"Traceback|File \"|\.py\b|site-packages|/tmp/|/home/|/work/|\bselect\b .* \bfrom\b"
    r"|duckdb\.|pydantic|validation error for|(?-i:[a-z]Arguments\b)",
    re.IGNORECASE,
)
UNHANDLED = ("Error executing tool", "internal error in")
TOOLS = ("search_slack", "get_slack_message", "get_slack_thread", "list_slack_scopes")
EDGE_DATES = ["9999-12-31", "0001-01-01", "0000-01-01", "2024-02-30", "99999-01-01", "today"]
HOSTILE_TEXT = [
    "",
    " ",
    "null",
    "None",
    "true",
    "[]",
    "{}",
    '{"o": 0}',
    "0",
    "-1",
    "1e309",
    "NaN",
    "\x00",
    "a\x00b",
    "\u202eevil\u202c",
    "line\nbreak\r\n",
    "\u2028\u2029",
    "e" + "\u0301" * 300,
    "ｆｕｌｌｗｉｄｔｈ＃",
    "x'); DROP TABLE search_documents; --",
    "' OR 1=1 --",
    "%s%n%x {0} {{}} $1",
    "../../../../etc/passwd",
    "<script>alert(1)</script>",
    "🎉" * 50,
    "база данных",
    "A" * 2001,
    "z" * 100_000,
    "https://acme＃.slack.com/archives/C1/p1234567890",
    "https://[zzz]/archives/C1/p1234567890",
    "https://[::1/archives/C1/p1234567890",
    "https://acme.slack.com/archives/C1/p" + "9" * 40,
    "http://acme.slack.com/archives/../p1234567890",
]
WRONG_TYPES: list[Any] = [
    None,
    0,
    -1,
    2**64,
    -(2**70),
    1.5,
    float("1e308"),
    True,
    False,
    [],
    [None],
    [1, 2],
    {},
    {"a": 1},
    [[["deep"]]],
]


@dataclass
class Known:
    """What the served artifact holds, for plausible arguments (filled by `discover`)."""

    document_ids: list[str] = field(default_factory=list)
    thread_ids: list[str] = field(default_factory=list)
    permalinks: list[str] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)
    workspaces: list[str] = field(default_factory=list)
    authors: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    cursors: list[str] = field(default_factory=list)


class CallGenerator:
    """Seeded (tool, arguments) pairs: mostly plausible, often hostile, sometimes ill-typed."""

    def __init__(self, known: Known, seed: int):
        self.known = known
        self.rng = random.Random(seed)

    def pick(self, values: list[Any]) -> Any:
        return values[self.rng.randrange(len(values))] if values else "x"

    def hostile(self) -> Any:
        roll = self.rng.random()
        if roll < 0.5:
            return self.pick(HOSTILE_TEXT)
        if roll < 0.75:
            return self.pick(WRONG_TYPES)
        return self.text()

    def value(self, plausible: Any) -> Any:
        """A plausible value most of the time, else a hostile or ill-typed one."""
        return plausible if self.rng.random() < 0.7 else self.hostile()

    def text(self) -> str:
        """Unicode text without lone surrogates (JSON can carry them; raw cases test those)."""
        length = self.rng.choice([1, 5, 20, 80, 400])
        chars = [chr(self.rng.choice([self.rng.randrange(32, 127), self.rng.randrange(0xD7FF)]))
                 for _ in range(length)]  # fmt: skip
        return "".join(chars)

    def query(self) -> Any:
        words = [self.pick(self.known.words) for _ in range(self.rng.randrange(1, 8))]
        kind = self.rng.randrange(8)
        if kind == 0:
            operator = self.pick(["before", "after", "on", "during", "is", "has", "in", "from"])
            words.append(f"{operator}:{self.pick([*EDGE_DATES, '9999', '0000-01', '2024-13'])}")
        elif kind == 1:
            words.append(
                f"in:#{self.pick(self.known.channels)} from:@{self.pick(self.known.authors)}"
            )
        elif kind == 2:
            return ", ".join(f"{self.pick(self.known.words)} {index}" for index in range(150))
        elif kind == 3:
            words.append(f'"{self.pick(self.known.words)} {self.pick(self.known.words)}"')
        elif kind == 4:
            return self.text()
        elif kind == 5:
            return self.hostile()
        return " ".join(words)

    def cursor(self) -> Any:
        cursor = self.pick(self.known.cursors)
        roll = self.rng.random()
        if roll < 0.3:
            return cursor
        if roll < 0.6 and cursor:
            position = self.rng.randrange(len(cursor))
            return (
                cursor[:position]
                + self.pick(["A", "é", ".", "", "\x00", "=="])
                + cursor[position + 1 :]
            )
        return self.hostile()

    def identifier(self, values: list[str]) -> Any:
        roll = self.rng.random()
        if roll < 0.4:
            return self.pick(values)
        if roll < 0.6:
            return self.pick(self.known.permalinks)
        if roll < 0.75:
            link = self.pick(self.known.permalinks)
            position = self.rng.randrange(max(1, len(link)))
            return (
                link[:position] + self.pick(["＃", "[", "]", "%", "ｓ", "@", ":"]) + link[position:]
            )
        return self.hostile()

    def arguments(self, tool: str) -> dict[str, Any]:
        if tool == "search_slack":
            arguments = {
                "query": self.query(),
                "mode": self.value(self.pick(["hybrid", "lexical", "semantic"])),
                "workspace_ids": self.value([self.pick(self.known.workspaces)]),
                "channel_ids": self.value([self.pick(self.known.channels) for _ in range(2)]),
                "author_ids": self.value([self.pick(self.known.authors)]),
                "conversation_types": self.value([self.pick(["public", "private", "dm"])]),
                "start_ts_us": self.value(self.rng.randrange(0, 2_000_000_000) * 1_000_000),
                "end_ts_us": self.value(self.rng.randrange(0, 2_000_000_000) * 1_000_000),
                "limit": self.value(self.rng.randrange(1, 60)),
                "cursor": self.cursor(),
            }
            keep = {"query"} | {name for name in arguments if self.rng.random() < 0.25}
        elif tool == "get_slack_message":
            arguments = {
                "document_id": self.identifier(self.known.document_ids),
                "context_before": self.value(self.rng.randrange(0, 60)),
                "context_after": self.value(self.rng.randrange(0, 60)),
            }
            keep = {"document_id"} | {name for name in arguments if self.rng.random() < 0.5}
        elif tool == "get_slack_thread":
            arguments = {
                "thread_id": self.identifier(self.known.thread_ids),
                "limit": self.value(self.rng.randrange(1, 600)),
            }
            keep = {"thread_id"} | {name for name in arguments if self.rng.random() < 0.5}
        else:
            arguments = {
                "workspace_id": self.value(self.pick(self.known.workspaces)),
                "channel_name": self.value(self.pick(self.known.channels)),
                "limit": self.value(self.rng.randrange(1, 600)),
            }
            keep = {name for name in arguments if self.rng.random() < 0.4}
        if self.rng.random() < 0.05:
            keep.discard(self.pick(sorted(keep)) if keep else "")  # a required one may go
        chosen = {name: value for name, value in arguments.items() if name in keep}
        if self.rng.random() < 0.05:
            chosen[self.pick(["extra", "sql", "__proto__", "x" * 300])] = self.hostile()
        return chosen

    def call(self) -> tuple[str, dict[str, Any]]:
        """One (tool, arguments) pair; now and then a tool that does not exist."""
        if self.rng.random() < 0.01:
            return self.pick(["search", "drop_tables", "x" * 5000, ""]), {}
        tool = self.pick(list(TOOLS))
        return tool, self.arguments(tool)


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)


def leaks(text: str, arguments: dict[str, Any]) -> bool:
    """A leak marker in `text` that the caller's own input does not explain."""
    echoed = " ".join(strings_in(arguments)).lower()
    return any(match.group(0).lower() not in echoed for match in LEAK.finditer(text))


def error_class(message: str) -> str:
    """The message with input echoes and numbers blanked, up to its first colon."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "…", message)
    text = re.sub(r"\d+", "N", text)
    return text.split(":")[0][:70] if "invalid arguments" not in text else text[:90]


@dataclass
class Tally:
    """Outcomes of a campaign; `failures()` are what the target says must be zero."""

    calls: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    unhandled: list[str] = field(default_factory=list)
    badly_formed: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    timeouts: int = 0
    slow: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    http_statuses: Counter[int] = field(default_factory=Counter)
    http_5xx: list[str] = field(default_factory=list)

    def record(self, tool: str, arguments: dict[str, Any], result: Any, seconds: float) -> None:
        self.calls += 1
        self.latencies_ms.append(seconds * 1000)
        self.slow += seconds > SLOW_S
        if not result.is_error:
            self.ok += 1
            return
        message = " ".join(getattr(block, "text", "") for block in result.content)
        self.errors[error_class(message)] += 1
        sample = f"{tool}: {message[:200]!r}"
        if any(marker in message for marker in UNHANDLED):
            self.unhandled.append(sample)
        if len(message) > MAX_ERROR_CHARS or not message.isprintable():
            self.badly_formed.append(sample)
        if leaks(message, arguments):
            self.leaked.append(sample)

    def failures(self) -> dict[str, int]:
        return {
            "unhandled": len(self.unhandled),
            "badly_formed_errors": len(self.badly_formed),
            "leaks": len(self.leaked),
            "timeouts": self.timeouts,
            f"over_{SLOW_S:g}_s": self.slow,
            "http_5xx": len(self.http_5xx),
        }

    def report(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms) or [0.0]
        return {
            "calls": self.calls,
            "ok": self.ok,
            "failures": self.failures(),
            "error_classes": dict(self.errors.most_common()),
            "latency_ms": {
                "p50": round(statistics.median(ordered), 1),
                "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
                "max": round(ordered[-1], 1),
            },
            "http_statuses": {
                str(code): count for code, count in sorted(self.http_statuses.items())
            },
            "samples": (self.unhandled + self.badly_formed + self.leaked + self.http_5xx)[:10],
        }


async def _session(url: str, token: str | None, work: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT_S) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        return await work(client)


async def discover(url: str, token: str | None = None) -> Known:
    """Ids, names, permalinks, words and cursors of the served artifact, via the tools."""
    known = Known()

    async def work(client: Client) -> None:
        scopes = (await client.call_tool("list_slack_scopes", {"limit": 500})).structured_content
        for scope in scopes["scopes"]:
            known.channels.append("#" + (scope["channel_name"] or scope["channel_id"]))
            known.channels.append(scope["channel_id"])
            known.workspaces.append(scope["workspace_slug"] or scope["workspace_id"])
        for query in ("the", "deploy", "error", "database", "thanks"):
            found = await client.call_tool(
                "search_slack", {"query": query, "limit": 5, "mode": "lexical"}
            )
            page = found.structured_content
            if page["next_cursor"]:
                known.cursors.append(page["next_cursor"])
            for hit in page["results"]:
                known.document_ids.append(hit["document_id"])
                known.thread_ids.append(hit["thread_id"] or hit["document_id"])
                if hit["permalink"]:
                    known.permalinks.append(hit["permalink"])
                if hit["author_name"]:
                    known.authors.append("@" + hit["author_name"])
                known.words.extend(re.findall(r"[A-Za-z][\w-]{2,}", hit["text"])[:8])

    await _session(url, token, work)
    known.workspaces = sorted(set(known.workspaces))
    return known


async def campaign(
    url: str,
    known: Known,
    *,
    calls: int,
    clients: int,
    seed: int,
    tally: Tally,
    token: str | None = None,
    timeout_s: float = CLIENT_TIMEOUT_S,
) -> None:
    """`clients` concurrent MCP clients, each making `calls // clients` generated calls."""

    async def one_client(index: int) -> None:
        generator = CallGenerator(known, seed * 1000 + index)

        async def work(client: Client) -> None:
            for _ in range(calls // clients):
                tool, arguments = generator.call()
                started = time.perf_counter()
                try:
                    with anyio.fail_after(timeout_s):
                        result = await client.call_tool(tool, arguments)
                except TimeoutError:
                    tally.timeouts += 1
                    continue
                tally.record(tool, arguments, result, time.perf_counter() - started)

        await _session(url, token, work)

    async with anyio.create_task_group() as group:
        for index in range(clients):
            group.start_soon(one_client, index)


def _chunks(total: int) -> Iterator[bytes]:
    for _ in range(total // 65536):
        yield b"x" * 65536


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _rpc(method: str, params: Any, request_id: Any = 1) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode()


def raw_http_cases(url: str, tally: Tally, token: str | None = None) -> None:
    """Requests no client library would send; none may get a 5xx or leak."""
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    two_mib = 2 * 1024 * 1024
    call = "tools/call"
    cases: list[tuple[str, str, dict[str, str], Any]] = [
        ("POST", "/mcp", MCP_HEADERS, _chunks(two_mib)),  # chunked, no Content-Length
        ("POST", "/mcp", MCP_HEADERS, b"x" * two_mib),  # declared
        ("POST", "/mcp", MCP_HEADERS, b"{not json"),
        ("POST", "/mcp", MCP_HEADERS, b""),
        ("POST", "/mcp", MCP_HEADERS, b"[]"),
        ("POST", "/mcp", MCP_HEADERS, b"null"),
        ("POST", "/mcp", MCP_HEADERS, b"[" * 100_000),
        ("POST", "/mcp", MCP_HEADERS, _rpc(call, {"name": "search_slack", "arguments": "x"})),
        ("POST", "/mcp", MCP_HEADERS, _rpc(call, {"name": 5, "arguments": {}})),
        ("POST", "/mcp", MCP_HEADERS, _rpc(call, None, request_id={"a": 1})),
        ("POST", "/mcp", MCP_HEADERS, _rpc("nope/method", {})),
        ("POST", "/mcp", MCP_HEADERS,
         b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_slack",'
         b'"arguments":{"query":"\\ud800 deploy"}}}'),
        ("POST", "/mcp", MCP_HEADERS,
         b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_slack_message",'
         b'"arguments":{"document_id":"\\udfff"}}}'),
        ("POST", "/mcp", MCP_HEADERS, b"\xff\xfe\x00garbage"),
        ("POST", "/mcp", {"Content-Type": "text/plain"}, _rpc("tools/list", {})),
        ("POST", "/mcp", {**MCP_HEADERS, "Accept": "text/html"}, _rpc("tools/list", {})),
        ("POST", "/mcp", {**MCP_HEADERS, "Content-Length": "abc"}, b"{}"),
        ("GET", "/mcp", {"Accept": "text/event-stream"}, None),
        ("DELETE", "/mcp", MCP_HEADERS, None),
        ("PUT", "/mcp", MCP_HEADERS, b"{}"),
        ("GET", "/" + "a" * 8000, {}, None),
        ("GET", "/%00%ff/../../etc/passwd", {}, None),
        ("GET", "/metrics", {}, None),
        ("GET", "/readyz", {}, None),
        ("POST", "/healthz", {}, b"{}"),
        ("POST", "/mcp", {**MCP_HEADERS, "Host": "evil.example"}, _rpc("tools/list", {})),
        ("POST", "/mcp", {**MCP_HEADERS, "Origin": "http://evil.example"}, _rpc("tools/list", {})),
    ]  # fmt: skip
    with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT_S) as http:
        for method, path, headers, body in cases:
            shown = str(body)[:40] if isinstance(body, bytes) else type(body).__name__
            label = f"{method} {path[:40]} {shown}"
            try:
                response = http.request(method, path, headers={**auth, **headers}, content=body)
            except httpx.HTTPError as error:  # a server that cuts a 2 MiB upload short
                tally.http_statuses[0] += 1
                # A cut upload is the server refusing it; a local error, the client refusing.
                cut = httpx.WriteError | httpx.RemoteProtocolError | httpx.LocalProtocolError
                if not isinstance(error, cut):
                    tally.http_5xx.append(f"{label}: {error!r}")
                continue
            tally.http_statuses[response.status_code] += 1
            if response.status_code >= 500:
                tally.http_5xx.append(f"{label}: {response.status_code} {response.text[:120]!r}")
            if leaks(
                response.text,
                {"body": body.decode("utf-8", "replace") if isinstance(body, bytes) else ""},
            ):
                tally.leaked.append(f"{label}: {response.text[:200]!r}")


def healthy(url: str, token: str | None = None) -> bool:
    """Probes answer and a plain search still works."""
    if httpx.get(f"{url}/healthz", timeout=30).status_code != 200:
        return False
    if httpx.get(f"{url}/readyz", timeout=30).status_code != 200:
        return False

    async def work(client: Client) -> bool:
        result = await client.call_tool(
            "search_slack", {"query": "deploy", "limit": 3, "mode": "lexical"}
        )
        return not result.is_error

    return anyio.run(_session, url, token, work)


@contextmanager
def server_process(home: Path) -> Iterator[tuple[str, int]]:
    """`python -m serving` on a free port over `home`; yields its URL and pid once ready."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(home)
    process = subprocess.Popen(
        [sys.executable, "-m", "serving", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 300
        while True:  # until /readyz answers (it loads the artifact); polling a child process
            try:
                if httpx.get(f"{url}/readyz", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > give_up or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # still finishing calls its clients gave up on
            process.kill()
            process.wait()


def rss_mb(pid: int) -> float:
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def run_benchmark(
    messages: int, rounds: int, clients: int, calls: int, seed: int, folder: Path | None
) -> dict[str, Any]:
    """Build the sample artifact, serve it, run the rounds and raw cases; the report."""
    if __package__:
        from benchmarks.serving_bench import bench_settings, build
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from serving_bench import bench_settings, build

    folder = folder or Path(tempfile.mkdtemp(prefix="slackquery-fuzz-"))
    built = build(folder, messages, reuse=True)
    tally = Tally()
    report: dict[str, Any] = {
        "messages": messages,
        "build_id": built["build_id"],
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    with server_process(bench_settings(folder).home) as (url, pid):
        known = anyio.run(discover, url)
        report["rss_mb_loaded"] = rss_mb(pid)
        rss: list[float] = []
        started = time.perf_counter()
        for round_index in range(rounds):
            work = partial(campaign, url, known, calls=clients * calls, clients=clients)
            anyio.run(partial(work, seed=seed + round_index, tally=tally))
            rss.append(rss_mb(pid))
            elapsed = round(time.perf_counter() - started)
            print(f"round {round_index + 1}: {tally.calls} calls, {elapsed} s", file=sys.stderr)
        report["campaign_s"] = round(time.perf_counter() - started, 1)
        raw_http_cases(url, tally)
        report["healthy_after"] = healthy(url)
        report["rss_mb_after_rounds"] = rss
        report["rss_growth_last_vs_first_round"] = round(rss[-1] / rss[0] - 1, 3)
        report.update(tally.report())
        report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        sys.stderr.write(json.dumps(report, ensure_ascii=False) + "\n")  # before shutdown
    return report


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=5000, help="sample workspace size")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients per round")
    parser.add_argument("--calls", type=int, default=130, help="calls per client per round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--folder", type=Path, help="work folder (an artifact there is reused)")
    args = parser.parse_args()
    report = run_benchmark(
        args.messages, args.rounds, args.clients, args.calls, args.seed, args.folder
    )
    sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
