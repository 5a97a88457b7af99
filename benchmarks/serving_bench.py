"""Retrieval benchmark: an N-message sample workspace through the pipeline, >= 200 queries per mode.

Corpus: the deterministic sample workspace (`slackquery.sample.generate_sample`, seed 7:
public and private channels, DMs, threads, bots, identifiers such as `ERR-503`, `40P01`,
`OPS-1234`, `v2.3.1`), imported, projected (`project(settings)`), built,
validated and published by the pipeline's own functions. Document vectors are seeded
random unit vectors (benchmarks/seeded_vectors.py records them as `succeeded` work items
of the configured generation): retrieval cost does not depend on their values, and
embedding the corpus with the model would dominate the run. Queries draw words from the
artifact's own FTS dictionary (Zipf over document frequency) and its channels and users.
Two-part questions ("what happened to the X, and how did we fix the Y?"), for which hybrid
search also embeds and ranks each part when the question-part arm is on (it is off by
default), are timed as a separate set of 100.
"Excluding embedding" runs use an embedder that returns seeded random unit vectors under
the same identity; "including embedding" runs use the real default model (warmed up on
other queries first, so the first query does not pay the model load), and repeating the
same queries shows the query-embedding cache. Sustained throughput: 8 concurrent
official MCP clients against `python -m serving` (a separate process) over Streamable
HTTP, 400 distinct queries the server has not seen (no cache hits), timed after a few
other queries have loaded the model. Cold CLI searches: `slackquery search` in new
processes, lexical and hybrid (benchmarks/cold_search_bench.py). The report records
the 1-minute load average: on a shared 2-core host, figures move with it.

Run: `python -m benchmarks.serving_bench --messages 100000` or `slackquery bench`;
`--folder DIR --reuse` keeps an artifact built earlier in DIR (1M takes a while to build).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from serving.access import Requester, published_requester
from serving.engine import SearchEngine
from serving.models import SearchRequest
from serving.semantic import kernel_instructions
from slackquery.artifacts import files
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.canonical.importer import import_source
from slackquery.commands import whole_number
from slackquery.commands.bench import MIN_QUERIES
from slackquery.duckdb_setup import open_database
from slackquery.embedding import build_embedder, configured_identity
from slackquery.embedding.base import GenerationIdentity
from slackquery.errors import SlackqueryError
from slackquery.projection import project
from slackquery.sample import generate_sample, vocab
from slackquery.sample.generator import MAX_MESSAGES, MIN_MESSAGES
from slackquery.settings import Settings

if __package__:
    from benchmarks.seeded_vectors import seed_vectors
else:  # loaded by path (`slackquery bench`): benchmarks/ is not a package on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from seeded_vectors import seed_vectors

SAMPLE_SEED = 7
VECTOR_SEED = 3
MARKER = "serving-bench.json"  # in --folder: which build holds which corpus size
PATH_VARIABLES = ("SLACKQUERY_CANONICAL_DB", "SLACKQUERY_STATE_DB", "SLACKQUERY_ARTIFACT_DIR")


class RandomQueryEmbedder:
    """Seeded random unit query vectors under a given identity (no model cost)."""

    def __init__(self, identity: GenerationIdentity):
        self.identity = identity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_queries(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.identity.stored_dimension), dtype=np.float32)
        for index, text in enumerate(texts):
            rng = np.random.default_rng(abs(hash(text)) % (2**32))
            vector = rng.standard_normal(self.identity.stored_dimension).astype(np.float32)
            out[index] = vector / np.linalg.norm(vector)
        return out


@dataclass(frozen=True)
class Corpus:
    """What queries may mention: the artifact's words (most frequent first), names, days."""

    words: list[str]
    channels: list[str]
    users: list[str]
    first_day: date


def read_corpus(artifact: Path) -> Corpus:
    """Words of the artifact's FTS dictionary plus its channel and user names."""
    connection = open_database(str(artifact), read_only=True)
    try:
        words = [
            row[0]
            for row in connection.execute(
                "select term from fts_main_search_documents.dict "
                "where regexp_full_match(term, '[a-z]{3,}') order by df desc, term"
            ).fetchall()
        ]
        channels = [
            row[0]
            for row in connection.execute(
                "select distinct channel_name from channels "
                "where conversation_type in ('public', 'private') order by 1"
            ).fetchall()
        ]
        users = [
            row[0]
            for row in connection.execute(
                "select distinct username from users where username is not null order by 1"
            ).fetchall()
        ]
        first = connection.execute("select min(posted_at)::date from search_documents").fetchone()
    finally:
        connection.close()
    assert first is not None and first[0] is not None
    return Corpus(words, channels, users, first[0])


def identifier(rng: np.random.Generator) -> str:
    """An identifier of a shape the sample text uses: error code, ticket or version."""
    kind = int(rng.integers(0, 3))
    if kind == 0:
        return vocab.ERROR_CODES[int(rng.integers(0, len(vocab.ERROR_CODES)))]
    if kind == 1:
        prefix = vocab.TICKET_PREFIXES[int(rng.integers(0, len(vocab.TICKET_PREFIXES)))]
        return f"{prefix}-{int(rng.integers(100, 5000))}"
    return f"v{int(rng.integers(1, 4))}.{int(rng.integers(0, 10))}.{int(rng.integers(0, 12))}"


def queries(corpus: Corpus, count: int, seed: int = 11) -> list[str]:
    """At least `count` distinct queries: keywords, identifiers, questions, Slack syntax."""
    rng = np.random.default_rng(seed)
    words = corpus.words
    after = (corpus.first_day + timedelta(days=4)).isoformat()
    out: list[str] = []
    while len(out) < count:
        kind = len(out) % 5
        zipf = [words[min(int(r), len(words)) - 1] for r in rng.zipf(1.3, size=12)]
        if kind == 0:
            text = " ".join(zipf[:2])
        elif kind == 1:
            text = identifier(rng)
        elif kind == 2:
            text = "how did we fix the " + " ".join(zipf[:6]) + " problem"
        elif kind == 3:
            channel = corpus.channels[int(rng.integers(0, len(corpus.channels)))]
            text = f"{zipf[0]} {zipf[1]} in:#{channel}"
        else:
            user = corpus.users[int(rng.integers(0, len(corpus.users)))]
            text = f"{zipf[0]} from:@{user} after:{after}"
        if text not in out:
            out.append(text)
    return out


def two_part_questions(corpus: Corpus, count: int, seed: int = 17) -> list[str]:
    """`count` distinct two-part questions from the same Zipf draw as `queries`."""
    rng = np.random.default_rng(seed)
    words = corpus.words
    out: list[str] = []
    while len(out) < count:
        zipf = [words[min(int(r), len(words)) - 1] for r in rng.zipf(1.3, size=4)]
        text = (
            f"what happened to the {zipf[0]} {zipf[1]}, and how did we fix the {zipf[2]} {zipf[3]}?"
        )
        if text not in out:
            out.append(text)
    return out


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
    }


def bench_settings(folder: Path) -> Settings:
    """Settings rooted at `folder`, whatever path variables the environment sets."""
    return Settings(home=folder, canonical_db=None, state_db=None, artifact_dir=None, log_dir=None)


def build(folder: Path, count: int, reuse: bool = False) -> dict[str, Any]:
    """Sample export -> import -> project -> seeded vectors -> build -> publish, in `folder`.

    Returns the build id, the artifact's counts and seconds per stage. With `reuse`, an
    artifact this function already built there for `count` is (re)published instead.
    """
    settings = bench_settings(folder)
    marker = folder / MARKER
    if reuse and marker.exists():
        built = json.loads(marker.read_text(encoding="utf-8"))
        artifact = files.artifact_file(settings.artifact_path, built["build_id"])
        if built["messages"] == count and artifact.exists():
            if current_artifact(settings) != artifact.resolve():
                publish(settings, built["build_id"])
            return {**built, "reused": True}
    stages: dict[str, float] = {}
    started = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal started
        now = time.perf_counter()
        stages[stage] = round(now - started, 1)
        started = now

    export = folder / "export" / f"sample-{count}.zip"
    generate_sample(export, messages=count, seed=SAMPLE_SEED)
    lap("generate_sample")
    import_source(settings, export)
    lap("import")
    project(settings)  # `build` takes only models whose data tests passed
    lap("project")
    seeded = seed_vectors(settings, seed=VECTOR_SEED)
    lap("seed_vectors")
    build_id = build_artifact(settings)
    lap("build_artifact_with_validation")
    published = publish(settings, build_id)
    lap("publish")
    built = {
        "messages": count,
        "build_id": build_id,
        "counts": published["counts"],
        "seeded_vectors": seeded["recorded"],
        "stages_s": stages,
    }
    marker.write_text(json.dumps(built, indent=2), encoding="utf-8")
    return {**built, "reused": False}


def time_modes(
    engine: SearchEngine,
    texts: list[str],
    modes: Sequence[str],
    requester: Requester | None = None,
) -> dict[str, Any]:
    return time_paired(engine, texts, modes, (requester,))[0]


def time_paired(
    engine: SearchEngine,
    texts: list[str],
    modes: Sequence[str],
    requesters: Sequence[Requester | None],
) -> list[dict[str, Any]]:
    """Per requester, each mode's latency summaries; every query runs as each requester in
    turn, the first one alternating, so drift over the run (load, caches) falls on all
    alike."""
    totals: list[dict[str, list[float]]] = [{mode: [] for mode in modes} for _ in requesters]
    without: list[dict[str, list[float]]] = [{mode: [] for mode in modes} for _ in requesters]
    paged: list[dict[str, list[float]]] = [{mode: [] for mode in modes} for _ in requesters]
    for mode in modes:
        for index, text in enumerate(texts):
            request = SearchRequest(query=text, mode=mode, limit=10)  # type: ignore[arg-type]
            shift = index % len(requesters)
            for turn in range(len(requesters)):
                which = (turn + shift) % len(requesters)
                started = time.perf_counter()
                timings = engine.search(request, requester=requesters[which]).timings_ms
                wall_ms = (time.perf_counter() - started) * 1000
                embed_ms = timings.get("embed", 0.0)
                totals[which][mode].append(timings["total"])
                without[which][mode].append(timings["total"] - embed_ms)
                paged[which][mode].append(wall_ms - embed_ms)
    # The engine's total stops before the page of hits (display rows, response models) is
    # built; `with_page_excluding_embedding_ms` is the whole call as a caller waits for it.
    return [
        {
            mode: {
                "total_ms": summary(total[mode]),
                "excluding_embedding_ms": summary(bare[mode]),
                "with_page_excluding_embedding_ms": summary(page[mode]),
            }
            for mode in modes
        }
        for total, bare, page in zip(totals, without, paged, strict=True)
    ]


def time_as_requester(
    engine: SearchEngine, texts: list[str], requester: Requester
) -> dict[str, Any]:
    """Every mode as `requester` and as the admin over the same queries, interleaved: those
    the requester may run (a filter naming a channel they cannot see is an error for them,
    by design)."""
    started = time.perf_counter()
    with engine.artifact() as loaded:
        visible = loaded.visibility(requester)
    assert visible is not None
    visibility_s = time.perf_counter() - started
    runnable = []
    for text in texts:
        try:
            engine.search(SearchRequest(query=text, mode="lexical", limit=1), requester=requester)
        except SlackqueryError:
            continue
        runnable.append(text)
    modes = ("lexical", "semantic", "hybrid")
    admin, scoped = time_paired(engine, runnable, modes, (None, requester))
    return {
        "requester": requester.key,
        "visible_documents": visible.document_count,
        "visibility_s": round(visibility_s, 3),
        "queries": len(runnable),
        "skipped_queries": len(texts) - len(runnable),
        "timing": "each query as the admin and as the requester in turn (first alternating)",
        "admin_random_query_vectors": admin,
        "random_query_vectors": scoped,
        "p95_change_pct": {
            mode: round(
                100
                * (
                    scoped[mode]["excluding_embedding_ms"]["p95"]
                    / admin[mode]["excluding_embedding_ms"]["p95"]
                    - 1
                ),
                1,
            )
            for mode in modes
        },
    }


def _cpu_seconds(process: psutil.Process) -> float:
    """User and system CPU time of `process` (children not included)."""
    times = process.cpu_times()
    return times.user + times.system


def throughput(
    home: Path, texts: list[str], clients: int = 8, per_client: int = 50
) -> dict[str, Any]:
    """Queries/s with `clients` concurrent MCP clients against a separate server process."""
    import anyio
    from mcp import Client

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {key: value for key, value in os.environ.items() if key not in PATH_VARIABLES}
    env["SLACKQUERY_HOME"] = str(home)
    launched = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "serving", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import httpx

        deadline = time.monotonic() + 120
        while True:  # wait until the server answers /readyz (it loads the artifact)
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        ready_s = time.perf_counter() - launched
        server = psutil.Process(process.pid)
        rss_after_load = server.memory_info().rss
        latencies: list[float] = []
        errors = 0

        async def client_loop(offset: int) -> None:
            nonlocal errors
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                for index in range(per_client):
                    text = texts[(offset * per_client + index) % len(texts)]
                    started = time.perf_counter()
                    result = await client.call_tool("search_slack", {"query": text, "limit": 10})
                    latencies.append((time.perf_counter() - started) * 1000)
                    errors += int(result.is_error)

        async def warm_up() -> None:
            # The server loads the embedding model on the first query (~3 s): sustained
            # throughput is timed after it, with queries outside the timed set.
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                for index in range(clients):
                    await client.call_tool("search_slack", {"query": f"warm up query {index}"})

        processes = {"server": server, "clients": psutil.Process()}
        cpu_s: dict[str, float] = {}

        async def main() -> float:
            await warm_up()
            before = {name: _cpu_seconds(watched) for name, watched in processes.items()}
            started = time.perf_counter()
            async with anyio.create_task_group() as group:
                for offset in range(clients):
                    group.start_soon(client_loop, offset)
            for name, watched in processes.items():
                cpu_s[name] = _cpu_seconds(watched) - before[name]
            return time.perf_counter() - started

        elapsed = anyio.run(main)
        rss_after_queries = server.memory_info().rss
    finally:
        process.terminate()
        process.wait(timeout=30)
    total = clients * per_client
    return {
        "clients": clients,
        "requests": total,
        "errors": errors,
        "queries_per_s": round(total / elapsed, 1),
        "latency_ms": summary(latencies),
        "mode": "hybrid, real query embedding, separate server process",
        # Both run on the same host: CPU the clients use is CPU the server cannot.
        "cpu_ms_per_query": {name: round(cpu * 1000 / total, 1) for name, cpu in cpu_s.items()},
        "server_ready_s": round(ready_s, 2),
        # Resident memory counts the artifact's mapped pages the process has touched; the
        # page cache shares them with every other process that maps the same artifact.
        "server_rss_after_load_mib": round(rss_after_load / 2**20, 1),
        "server_rss_after_queries_mib": round(rss_after_queries / 2**20, 1),
    }


def run_benchmark(
    count: int,
    query_count: int = MIN_QUERIES,
    clients: int = 8,
    folder: Path | None = None,
    reuse: bool = False,
    as_user: str | None = None,
    as_workspace: str | None = None,
) -> dict[str, Any]:
    """Build, load and time everything; returns the report. With `as_user`, the random-
    vector timings are repeated as that requester (visibility mask on every query)."""
    # Checked before the corpus is built: percentiles of no queries failed only at the end.
    if query_count < MIN_QUERIES or clients < 0:
        raise ValueError(
            f"need at least {MIN_QUERIES} queries and 0 or more clients, "
            f"got {query_count} and {clients}"
        )
    folder = folder or Path(tempfile.mkdtemp(prefix="slackquery-bench-"))
    load_before = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    built = build(folder, count, reuse)
    build_s = time.perf_counter() - started
    settings = bench_settings(folder)
    artifact = current_artifact(settings)
    assert artifact is not None
    corpus = read_corpus(artifact)
    texts = queries(corpus, query_count)
    identity = configured_identity(settings)
    assert identity is not None  # seed_vectors recorded vectors under it
    engine = SearchEngine(settings, embedder=RandomQueryEmbedder(identity))
    started = time.perf_counter()
    engine.status()
    load_s = time.perf_counter() - started
    time_modes(engine, texts[:20], ("lexical", "semantic", "hybrid"))  # warm-up
    fast = time_modes(engine, texts, ("lexical", "semantic", "hybrid"))
    two_part = two_part_questions(corpus, 100)
    fast_two_part = time_modes(engine, two_part, ("hybrid",))
    as_requester = None
    if as_user:
        requester = published_requester(settings, as_user, as_workspace)
        as_requester = time_as_requester(engine, texts, requester)
    engine.close()
    real = SearchEngine(settings, embedder=build_embedder(settings))
    real.status()
    # Warm-up with other queries: loads the model without filling the cache for `texts`.
    time_modes(real, [f"warm up query {index}" for index in range(20)], ("hybrid",))
    with_model = time_modes(real, texts, ("hybrid",))
    with_model_two_part = time_modes(real, two_part, ("hybrid",))
    repeated = time_modes(real, texts, ("hybrid",))  # the query-embedding cache answers
    real.close()
    report = {
        "messages": count,
        "corpus": f"slackquery.sample.generate_sample(messages={count}, seed={SAMPLE_SEED})",
        "artifact_counts": built["counts"],
        "queries": len(texts),
        "load_average_1m_before": load_before,
        "vectors": f"document vectors: seeded random unit vectors, {identity.stored_dimension}-d "
        "(benchmarks/seeded_vectors.py), recorded as the configured generation",
        "int8_scan": kernel_instructions(identity.stored_dimension),
        "build_s": round(build_s, 1),
        "build_stages_s": built["stages_s"],
        "reused_artifact": built["reused"],
        "load_s": round(load_s, 2),
        "random_query_vectors": fast,
        "default_model_query_embedding": with_model,
        "default_model_repeated_queries": repeated,
        "two_part_questions": {
            "random_query_vectors": fast_two_part,
            "default_model_query_embedding": with_model_two_part,
        },
        "load_average_1m_after_timing": round(os.getloadavg()[0], 2),
    }
    if as_requester is not None:
        report["as_requester"] = as_requester
    report["cold_cli_search"] = cold_searches(folder)
    if clients:
        # Distinct queries, none seen before by the server: no query-embedding cache hits.
        report["throughput"] = throughput(folder, queries(corpus, clients * 50, seed=13), clients)
        report["load_average_1m_after_throughput"] = round(os.getloadavg()[0], 2)
    return report


def cold_searches(folder: Path) -> dict[str, Any]:
    """benchmarks/cold_search_bench.py over `folder`'s artifact, in a process of its own: a
    child's peak RSS as `wait4` reports it starts from its parent's at the fork, and this
    process holds gigabytes by now."""
    command = [sys.executable, "-m", "benchmarks.cold_search_bench", "--home", str(folder)]
    finished = subprocess.run(
        [*command, "--repeats", "3"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        check=True,
        text=True,
    )
    return json.loads(finished.stdout)


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--messages", type=whole_number(MIN_MESSAGES, MAX_MESSAGES), default=100_000
    )
    parser.add_argument("--queries", type=whole_number(MIN_QUERIES), default=MIN_QUERIES)
    parser.add_argument(
        "--clients", type=whole_number(0), default=8, help="0 skips the throughput run"
    )
    parser.add_argument("--folder", type=Path, help="work folder (default: a new temporary one)")
    parser.add_argument(
        "--reuse", action="store_true", help="keep an artifact already built in --folder"
    )
    parser.add_argument("--as", dest="as_user", help="also time searches as this Slack user")
    parser.add_argument("--as-workspace", help="the --as user's workspace, when ambiguous")
    args = parser.parse_args()
    report = run_benchmark(
        args.messages,
        args.queries,
        args.clients,
        args.folder,
        args.reuse,
        args.as_user,
        args.as_workspace,
    )
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
