"""`slackquery bench`: the retrieval benchmark (benchmarks/serving_bench.py)."""

import argparse
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from slackquery.commands import add_json_flag, emit
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bench` subcommand."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark retrieval latency and MCP throughput on a generated corpus",
        description="Build an N-message sample workspace through the real pipeline (seeded "
        "random unit document vectors instead of the model) in a temporary folder, then "
        "report p50/p95/max latency per mode over at least 200 varied queries (with and "
        "without query embedding), the sustained throughput of 8 concurrent MCP clients and "
        "cold `slackquery search` processes. Does not touch your artifacts.",
    )
    parser.add_argument("--messages", type=int, default=100_000, help="corpus size")
    parser.add_argument("--queries", type=int, default=200, help="distinct queries per mode")
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent MCP clients (0 skips the run)"
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
    report = run_benchmark(
        args.messages,
        args.queries,
        args.clients,
        as_user=args.as_user,
        as_workspace=args.as_workspace,
    )
    emit(args, report, json.dumps(report, indent=2))
    return 0
