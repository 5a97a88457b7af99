"""Embedding benchmark: docs/s in-process and over HTTP, bookkeeping overhead, no-op re-run.

    .venv/bin/python benchmarks/embed_bench.py [--docs 2000] [--noop-docs 100000] [--json]
        [--model NAME ...] [--only in_process,http,noop,dask] [--dask-workers 1,2]

1. `--docs` synthetic Slack-like messages (deterministic, 6-40 words from a mixed-language
   vocabulary, rendered `#channel author: text`) are embedded by `embed_pending` in-process
   with each `--model` (default: the configured one), then again through the real
   `embed-server` app (uvicorn on loopback, Ollama protocol).
   Overhead = (run wall time - time inside the model call) / model time.
2. Dask (`--only dask`): the Prefect embed flow on a LocalCluster of each `--dask-workers`
   count (single-threaded workers, a temporary Prefect API), timed inside the flow after
   the flow starts; overhead = 1 - (time inside the model, summed over workers) /
   (workers x wall time), i.e. the share of worker time not spent embedding; bookkeeping
   overhead is the same after the warm-up (`worker_warm_up_s`: the workers start and load
   the model, all at once, before the first claim).
3. No-op re-run: `--noop-docs` documents whose work items are already `succeeded`, with
   seeded random unit vectors (not model output: only the bookkeeping is timed), then
   `embed_pending` is timed with nothing to do (warm process, embedder already built).
"""

import argparse
import hashlib
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slackquery.commands import whole_number  # noqa: E402
from slackquery.embedding import build_embedder  # noqa: E402
from slackquery.embedding.onnx_bert import int8_encoding  # noqa: E402
from slackquery.embedding.packaged import PACKAGED_MODELS  # noqa: E402
from slackquery.embedding.server import create_app  # noqa: E402
from slackquery.embedding.work import embed_pending  # noqa: E402
from slackquery.listening import listen_on  # noqa: E402
from slackquery.settings import Settings  # noqa: E402
from tests.embedding.documents import SEARCH_DOCUMENTS_DDL  # noqa: E402

VOCABULARY = (
    "deploy failed migration postgres password rejected release tagged changelog on-call "
    "rotation billing dashboard owner lunch friday staging prod rollback latency p99 alert "
    "pager incident retro ticket ERR-42 28P01 v2.3.1 kubernetes pod restart memory leak "
    "база данных недоступна 数据库 连接 超时 cache invalidation feature flag customer "
    "escalation review approve merge branch hotfix"
)
WORDS = VOCABULARY.split()


def synthetic_messages(count: int, seed: int = 42) -> list[str]:
    """Deterministic Slack-like texts rendered like `text_embedding`."""
    rng = random.Random(seed)
    channels = ("general", "eng", "ops", "random", "support")
    return [
        f"#{rng.choice(channels)} user{rng.randrange(40)}: "
        + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40)))
        for _ in range(count)
    ]


def create_documents(path: Path, texts: list[str]) -> None:
    """A state DB whose `search_documents` holds one active message per text (bulk insert)."""
    connection = duckdb.connect(str(path))
    connection.execute(SEARCH_DOCUMENTS_DDL)
    ids = [f"W1:C1:{1700000000 + i}.000100" for i in range(len(texts))]
    hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    connection.execute(
        """
        insert into search_documents (document_id, document_kind, text_embedding, text_hash,
            is_active, message_ids)
        select unnest($ids), 'message', unnest($texts), unnest($hashes), true, []
        """,
        {"ids": ids, "texts": texts, "hashes": hashes},
    )
    connection.close()


def run_embed(settings: Settings) -> dict[str, Any]:
    started = time.perf_counter()
    result = embed_pending(settings)
    wall = time.perf_counter() - started
    return {
        "documents": result["succeeded"],
        "wall_s": round(wall, 2),
        "model_s": result["model_s"],
        "docs_per_s": round(result["succeeded"] / wall, 1),
        "model_docs_per_s": round(result["succeeded"] / result["model_s"], 1),
        "bookkeeping_overhead_pct": round(100 * (wall - result["model_s"]) / result["model_s"], 2),
    }


def bench_http(settings: Settings, home: Path, texts: list[str]) -> dict[str, Any]:
    model = PACKAGED_MODELS[settings.embedding_model]
    # Bound as `slackquery serve` binds (TCP_NODELAY on each connection): a bare socket
    # would add a ~40 ms delayed-ACK stall to every batch's response.
    (sock,) = listen_on("127.0.0.1", 0)
    server = uvicorn.Server(
        uvicorn.Config(create_app(model, max_batch=256), log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        home.mkdir(parents=True)
        create_documents(home / "state.duckdb", texts)
        # A fresh Settings, not model_copy: the derived paths are cached properties.
        http = Settings(
            home=home,
            embedding_model=settings.embedding_model,
            embedding_transport="ollama",
            embedding_url=f"http://127.0.0.1:{sock.getsockname()[1]}",
        )
        return run_embed(http)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def bench_dask(model: str, root: Path, texts: list[str], workers: int) -> dict[str, Any]:
    """The embed flow on a LocalCluster of `workers`; model loading counts as overhead."""
    from flows.embed import with_dask

    home = root / f"dask-{workers}"
    home.mkdir()
    create_documents(home / "state.duckdb", texts)
    os.environ.update({"SLACKQUERY_HOME": str(home), "SLACKQUERY_EMBEDDING_MODEL": model})
    cpu_before = _process_cpu_s()
    result = with_dask(workers=workers)()
    flow_cpu_s = _process_cpu_s() - cpu_before
    wall = result["elapsed_s"]
    embedding_wall = wall - result["worker_warm_up_s"]
    return {
        "workers": workers,
        "batches": result["batches"],
        "documents": result["succeeded"],
        "wall_s": wall,
        "worker_warm_up_s": result["worker_warm_up_s"],
        "docs_per_s": round(result["succeeded"] / wall, 1),
        # CPU this process spent (the flow, the Dask scheduler, recording into DuckDB),
        # taken from the cores the workers embed on.
        "flow_process_cpu_s": round(flow_cpu_s, 1),
        "overhead_pct": round(100 * (1 - result["model_s"] / (workers * wall)), 2),
        "bookkeeping_overhead_pct": round(
            100 * (1 - result["model_s"] / (workers * embedding_wall)), 2
        ),
    }


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_noop(settings: Settings, home: Path, count: int) -> dict[str, Any]:
    home.mkdir(parents=True)
    path = home / "state.duckdb"
    texts = [f"#general user{i % 50}: message number {i}" for i in range(count)]
    create_documents(path, texts)
    config = Settings(home=home)
    embed_pending(config, max_items=0)  # creates the schema and enqueues every document
    identity = build_embedder(config).identity
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((count, identity.stored_dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    connection = duckdb.connect(str(path))
    connection.execute("create temp table seeded (document_id varchar, embedding float[])")
    ids = [f"W1:C1:{1700000000 + i}.000100" for i in range(count)]
    for start in range(0, count, 10_000):
        connection.execute(
            "insert into seeded select unnest($ids), unnest($vectors::float[][])",
            {
                "ids": ids[start : start + 10_000],
                "vectors": vectors[start : start + 10_000].tolist(),
            },
        )
    connection.execute(
        """
        update embedding_work_items as items set state = 'succeeded',
            embedding = seeded.embedding, embedded_at = now(), updated_at = now()
        from seeded where items.document_id = seeded.document_id
        """
    )
    connection.close()
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        result = embed_pending(config)
        timings.append(time.perf_counter() - started)
        assert result["claimed"] == 0 and result["counts"]["succeeded"] == count
    return {
        "documents": count,
        "runs_s": [round(t, 3) for t in timings],
        "best_s": round(min(timings), 3),
    }


PARTS = ("in_process", "http", "noop", "dask")


def part_names(value: str) -> set[str]:
    """An argparse type: parts of the benchmark, each one of PARTS."""
    parts = {part.strip() for part in value.split(",")}
    unknown = sorted(parts - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}"
        )
    return parts


def worker_counts(value: str) -> list[int]:
    """An argparse type: comma-separated Dask worker counts, each at least 1."""
    return [whole_number(1)(count.strip()) for count in value.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--docs",
        type=whole_number(1),
        default=2000,
        help="synthetic messages embedded in each timed part (default 2000)",
    )
    parser.add_argument(
        "--noop-docs",
        type=whole_number(1),
        default=100_000,
        help="already-embedded documents for the no-op re-run (default 100000)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--model", action="append", help="packaged model(s) to time")
    parser.add_argument(
        "--only",
        type=part_names,
        default="in_process,http,noop",
        help=f"comma-separated parts to run, of {', '.join(PARTS)} (default in_process,http,noop)",
    )
    parser.add_argument(
        "--dask-workers",
        type=worker_counts,
        default="1,2",
        help="comma-separated worker counts for --only dask (default 1,2)",
    )
    args = parser.parse_args()
    parts = args.only
    texts = synthetic_messages(args.docs)
    with tempfile.TemporaryDirectory(prefix="embed-bench-") as tmp:
        root = Path(tmp)
        default = Settings(home=root)
        report: dict[str, Any] = {
            "batch_size": default.embedding_batch_size,
            "dask_batch_size": default.embedding_dask_batch_size,
            "load_average_1m_before": round(os.getloadavg()[0], 2),
            # How ort-int8/ weights run here (int8 with VNNI or AMX, else uint8): it sets
            # the speed of the default model (onnx_bert.int8_encoding).
            "int8_encoding": int8_encoding(),
        }
        for model in args.model or [default.embedding_model]:
            home = root / f"inprocess-{len(report)}"
            home.mkdir()
            create_documents(home / "state.duckdb", texts)
            settings = Settings(home=home, embedding_model=model)
            build_embedder(settings).embed_documents(["warm-up"])  # load outside the timed runs
            if "in_process" in parts:
                report[f"in_process {model}"] = run_embed(settings)
            if "http" in parts:
                report[f"http_ollama_embed_server {model}"] = bench_http(
                    settings, root / f"http-{len(report)}", texts
                )
        if "dask" in parts:
            from prefect.testing.utilities import prefect_test_harness

            os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # offline
            with prefect_test_harness(server_startup_timeout=180):
                for model in args.model or [default.embedding_model]:
                    for workers in args.dask_workers:
                        report[f"dask {model} x{workers}"] = bench_dask(model, root, texts, workers)
        if "noop" in parts:
            report["noop_rerun"] = bench_noop(default, root / "noop", args.noop_docs)
    report["uptime"] = os.popen("uptime").read().strip()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for name, value in report.items():
            sys.stdout.write(f"{name}: {value}\n")


if __name__ == "__main__":
    main()
