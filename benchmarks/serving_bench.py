"""Retrieval benchmark: generate an N-message artifact, time >= 200 varied queries per mode.

Corpus: Zipf-distributed words from a synthetic vocabulary, sprinkled with identifiers
(`ERR-123`, `v1.2.3`), 50 channels, 200 users, ~20% of messages in threads. Document
vectors are seeded random unit vectors (retrieval cost does not depend on their values);
the artifact claims the packaged model's generation, so real query embedding can be timed
against it. "Excluding embedding" runs use an embedder that returns seeded random unit
vectors under the same identity; "including embedding" runs use the real default model
(warmed up on other queries first, so the first query does not pay the model load), and
repeating the same queries shows the query-embedding cache. Sustained throughput: 8
concurrent official MCP clients against `python -m serving` (a separate process) over
Streamable HTTP, 400 distinct queries the server has not seen (no cache hits). The report
records the 1-minute load average: on a shared 2-core host, figures move with it.

Run: `python -m benchmarks.serving_bench --messages 100000` or `slackquery bench`;
`--folder DIR --reuse` keeps an artifact built earlier in DIR (1M takes minutes to build).
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
from pathlib import Path
from typing import Any

import numpy as np

from serving.engine import SearchEngine
from serving.models import SearchRequest
from serving.sample_artifact import SampleMessage, publish_pointer, write_artifact
from slackquery.embedding import build_embedder
from slackquery.embedding.base import GenerationIdentity
from slackquery.settings import Settings

SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "so",
    "vi",
    "de",
    "pa",
    "zu",
    "go",
    "fe",
    "hi",
    "ja",
    "qu",
    "ri",
    "xo",
    "ba",
    "ce",
]
DIMENSION = 384


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


class ModelTimedEmbedder:
    """The real default model's query embedding, re-labelled with the artifact identity."""

    def __init__(self, identity: GenerationIdentity, settings: Settings):
        self.identity = identity
        self._model = build_embedder(settings)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.embed_queries(texts)


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """Distinct pronounceable words."""
    words: set[str] = set()
    while len(words) < size:
        count = int(rng.integers(2, 5))
        words.add("".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), count)))
    return sorted(words)


def generate(count: int, seed: int = 7) -> tuple[list[SampleMessage], list[str]]:
    """`count` messages with Zipf text; returns the messages and the vocabulary."""
    rng = np.random.default_rng(seed)
    words = vocabulary(20_000, rng)
    ranks = np.minimum(rng.zipf(1.15, size=count * 30), len(words)) - 1
    lengths = rng.integers(5, 30, size=count)
    messages: list[SampleMessage] = []
    cursor = 0
    base = 1_672_531_200
    thread_root: dict[int, str] = {}
    for index in range(count):
        picked = [words[r] for r in ranks[cursor : cursor + lengths[index]]]
        cursor += int(lengths[index])
        if rng.random() < 0.1:
            picked.append(f"ERR-{int(rng.integers(1, 500))}")
        if rng.random() < 0.05:
            picked.append(
                f"v{int(rng.integers(1, 5))}.{int(rng.integers(0, 20))}.{int(rng.integers(0, 9))}"
            )
        channel = int(rng.integers(0, 50))
        user = int(rng.integers(0, 200))
        ts = f"{base + index * 30}.{index % 1_000_000:06d}"
        thread_ts = None
        if rng.random() < 0.2:
            if channel in thread_root and rng.random() < 0.7:
                thread_ts = thread_root[channel]
            else:
                thread_root[channel] = ts
                thread_ts = ts
        messages.append(
            SampleMessage(
                workspace_id=f"W{channel % 2}",
                workspace_slug=f"ws{channel % 2}",
                channel_id=f"C{channel:04d}",
                channel_name=f"chan-{channel}",
                user_id=f"U{user:04d}",
                user_name=f"user{user}",
                ts=ts,
                text=" ".join(picked),
                thread_ts=thread_ts,
            )
        )
    return messages, words


def queries(words: list[str], count: int, seed: int = 11) -> list[str]:
    """At least `count` distinct queries: keywords, identifiers, questions, Slack syntax."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < count:
        kind = len(out) % 5
        zipf = [words[min(int(r), len(words)) - 1] for r in rng.zipf(1.3, size=12)]
        if kind == 0:
            text = " ".join(zipf[:2])
        elif kind == 1:
            text = f"ERR-{int(rng.integers(1, 500))}"
        elif kind == 2:
            text = "how did we fix the " + " ".join(zipf[:6]) + " problem"
        elif kind == 3:
            text = f"{zipf[0]} {zipf[1]} in:#chan-{int(rng.integers(0, 50))}"
        else:
            text = f"{zipf[0]} from:@user{int(rng.integers(0, 200))} after:2023-01-05"
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


def build(
    folder: Path, count: int, reuse: bool = False
) -> tuple[Path, GenerationIdentity, list[str]]:
    """Generate and write the artifact; publish it under folder/artifacts.

    With `reuse`, an artifact this function already wrote there for `count` is kept.
    """
    settings = Settings(home=folder)
    identity = build_embedder(settings).identity
    existing = settings.artifact_path / f"search-bench-{count}.duckdb"
    if reuse and existing.exists():
        publish_pointer(settings.artifact_path, existing)
        # generate() draws the vocabulary first from the same seed.
        return existing, identity, vocabulary(20_000, np.random.default_rng(7))
    messages, words = generate(count)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((count, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    artifacts = settings.artifact_path
    artifacts.mkdir(parents=True, exist_ok=True)
    path = write_artifact(
        artifacts / f"search-bench-{count}.duckdb", messages, vectors, identity, f"bench-{count}"
    )
    publish_pointer(artifacts, path)
    return path, identity, words


def time_modes(engine: SearchEngine, texts: list[str], modes: Sequence[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for mode in modes:
        totals, without_embed = [], []
        for text in texts:
            response = engine.search(SearchRequest(query=text, mode=mode, limit=10))  # type: ignore[arg-type]
            total = response.timings_ms["total"]
            totals.append(total)
            without_embed.append(total - response.timings_ms.get("embed", 0.0))
        result[mode] = {
            "total_ms": summary(totals),
            "excluding_embedding_ms": summary(without_embed),
        }
    return result


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
    env = {**os.environ, "SLACKQUERY_HOME": str(home)}
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

        async def main() -> float:
            started = time.perf_counter()
            async with anyio.create_task_group() as group:
                for offset in range(clients):
                    group.start_soon(client_loop, offset)
            return time.perf_counter() - started

        elapsed = anyio.run(main)
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
    }


def run_benchmark(
    count: int,
    query_count: int = 200,
    clients: int = 8,
    folder: Path | None = None,
    reuse: bool = False,
) -> dict[str, Any]:
    """Build, load and time everything; returns the report."""
    folder = folder or Path(tempfile.mkdtemp(prefix="slackquery-bench-"))
    load_before = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    _path, identity, words = build(folder, count, reuse)
    build_s = time.perf_counter() - started
    texts = queries(words, query_count)
    settings = Settings(home=folder)
    engine = SearchEngine(settings, embedder=RandomQueryEmbedder(identity))
    started = time.perf_counter()
    engine.status()
    load_s = time.perf_counter() - started
    time_modes(engine, texts[:20], ("lexical", "semantic", "hybrid"))  # warm-up
    fast = time_modes(engine, texts, ("lexical", "semantic", "hybrid"))
    engine.close()
    real = SearchEngine(settings, embedder=ModelTimedEmbedder(identity, settings))
    real.status()
    # Warm-up with other queries: loads the model without filling the cache for `texts`.
    time_modes(real, [f"warm up query {index}" for index in range(20)], ("hybrid",))
    with_model = time_modes(real, texts, ("hybrid",))
    repeated = time_modes(real, texts, ("hybrid",))  # the query-embedding cache answers
    real.close()
    report = {
        "messages": count,
        "queries": len(texts),
        "load_average_1m_before": load_before,
        "vectors": "seeded random unit vectors, 384-d",
        "build_s": round(build_s, 1),
        "load_s": round(load_s, 2),
        "random_query_vectors": fast,
        "default_model_query_embedding": with_model,
        "default_model_repeated_queries": repeated,
        "load_average_1m_after_timing": round(os.getloadavg()[0], 2),
    }
    if clients:
        # Distinct queries, none seen before by the server: no query-embedding cache hits.
        report["throughput"] = throughput(folder, queries(words, clients * 50, seed=13), clients)
        report["load_average_1m_after_throughput"] = round(os.getloadavg()[0], 2)
    return report


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8, help="0 skips the throughput run")
    parser.add_argument("--folder", type=Path, help="work folder (default: a new temporary one)")
    parser.add_argument(
        "--reuse", action="store_true", help="keep an artifact already built in --folder"
    )
    args = parser.parse_args()
    report = run_benchmark(args.messages, args.queries, args.clients, args.folder, args.reuse)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
