"""`slackquery bench`: the retrieval benchmark (benchmarks/serving_bench.py)."""

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from slackquery.commands import add_json_flag, emit, whole_number
from slackquery.errors import SlackqueryError
from slackquery.sample.generator import MAX_MESSAGES, MIN_MESSAGES
from slackquery.settings import Settings

# The fewest distinct queries per mode: the p50/p95 the benchmark reports are over at
# least this many (benchmarks/serving_bench.py imports it for its own command line).
MIN_QUERIES = 200


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bench` subcommand."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark retrieval latency and MCP throughput on a generated corpus",
        description="Build an N-message sample workspace through the real pipeline (seeded "
        "random unit document vectors instead of the model) in a temporary folder, then "
        f"report p50/p95/max latency per mode over at least {MIN_QUERIES} varied queries "
        "(with and without query embedding), the sustained throughput of --clients "
        "concurrent MCP clients and cold `slackquery search` processes. Does not touch your "
        "artifacts.",
    )
    parser.add_argument(
        "--messages",
        type=whole_number(MIN_MESSAGES, MAX_MESSAGES),
        default=100_000,
        help=f"corpus size ({MIN_MESSAGES:,} to {MAX_MESSAGES:,}; default 100,000)",
    )
    parser.add_argument(
        "--queries",
        type=whole_number(MIN_QUERIES),
        default=MIN_QUERIES,
        help=f"distinct queries per mode (at least {MIN_QUERIES}, the default)",
    )
    parser.add_argument(
        "--clients",
        type=whole_number(0),
        default=8,
        help="concurrent MCP clients (default 8; 0 skips the throughput run)",
    )
    parser.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="also time every mode as this Slack user of the sample (U… or @name): the "
        "visibility mask on every query, for comparing with the runs without",
    )
    parser.add_argument("--as-workspace", metavar="WORKSPACE", help="the --as user's workspace")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def _load_benchmark() -> ModuleType:
    """benchmarks/serving_bench.py of this checkout (benchmarks are not an installed package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "serving_bench.py"
    if not path.exists():
        raise SlackqueryError(f"benchmark script not found at {path}; run from a source checkout")
    spec = importlib.util.spec_from_file_location("serving_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the benchmark and print its report."""
    run_benchmark = _load_benchmark().run_benchmark
    try:
        report = run_benchmark(
            args.messages,
            args.queries,
            args.clients,
            as_user=args.as_user,
            as_workspace=args.as_workspace,
        )
    except SlackqueryError as error:
        # `--as` is resolved the way serving resolves it, whose messages name "the published
        # artifact"; here that is the benchmark's own sample, never the user's artifact.
        sample = f"the benchmark's {args.messages:,}-message sample workspace"
        raise SlackqueryError(str(error).replace("the published artifact", sample)) from None
    emit(args, report, render(report))
    return 0


def _latency(timings: dict[str, Any], key: str = "excluding_embedding_ms") -> str:
    figures = timings[key]
    return f"{figures['p50']:.2f} / {figures['p95']:.2f} / {figures['max']:.2f}"


def render(report: dict[str, Any]) -> str:
    """The report's headline figures as lines of text (`--json` prints all of it)."""
    counts = report["artifact_counts"]
    built = (
        "artifact reused" if report.get("reused_artifact") else f"built in {report['build_s']} s"
    )
    lines = [
        f"{report['messages']:,} messages: {counts['document_count']:,} documents, "
        f"{counts['vector_count']:,} seeded vectors; {built}, loaded in {report['load_s']} s; "
        f"load average {report['load_average_1m_before']} before, "
        f"{report['load_average_1m_after_timing']} after the timings",
        f"search p50 / p95 / max in ms over {report['queries']} queries per mode, excluding "
        "query embedding (in brackets: the whole call, with its page of hits):",
    ]
    for mode, timings in report["random_query_vectors"].items():
        whole = _latency(timings, "with_page_excluding_embedding_ms")
        lines.append(f"  {mode:<9} {_latency(timings)}  ({whole})")
    with_model = report["default_model_query_embedding"]["hybrid"]
    lines.append(
        f"  hybrid with the default model's query embedding: {_latency(with_model, 'total_ms')}"
    )
    two_part = report["two_part_questions"]["random_query_vectors"]["hybrid"]
    lines.append(f"  two-part questions, hybrid: {_latency(two_part)}")
    requester = report.get("as_requester")
    if requester is not None:
        lines.append(f"as {requester['requester']}, p95 change against the operator:")
        lines.extend(
            f"  {mode:<9} {change:+.1f}%" for mode, change in requester["p95_change_pct"].items()
        )
    cold = report["cold_cli_search"]
    lines.append(
        "cold `slackquery search` (s, new processes): "
        + "; ".join(
            f"{mode} {min(cold[mode]['s'])}-{max(cold[mode]['s'])}"
            for mode in ("lexical", "hybrid")
        )
        + f"; the first after an install {cold['hybrid_building_the_model_graphs']['s']}"
    )
    throughput = report.get("throughput")
    if throughput is not None:
        lines.append(
            f"{throughput['clients']} MCP clients: {throughput['queries_per_s']} queries/s, p95 "
            f"{throughput['latency_ms']['p95']} ms, {throughput['errors']} errors of "
            f"{throughput['requests']}; server ready in {throughput['server_ready_s']} s at "
            f"{throughput['server_rss_after_load_mib']} MiB"
        )
    return "\n".join(lines)
