"""`slackquery embed`: embed every active message document that lacks a current vector.

Engine choice (`--engine`, `slackquery.commands.add_engine_flag`): the Prefect flow `embed`
when a Prefect API is configured, otherwise the same steps as plain Python
(`slackquery.embedding.work.embed_pending`); a temporary Prefect API (~20 s) would dwarf a
no-op re-run (well under 2 s on 100,000 documents). `--dask-workers N` or `--dask-address`
fan the batches out over Dask, which only the Prefect flow can do (prefect-dask).
"""

import argparse
import re
from typing import Any

from slackquery.commands import (
    add_engine_flag,
    add_json_flag,
    emit,
    shows_progress,
    use_prefect,
    whole_number,
    writes_the_pipeline,
)
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

# The Dask transports that reach a scheduler over TCP (`ucx` needs UCX network hardware,
# `inproc` stays inside one process).
_SCHEDULER_ADDRESS = re.compile(
    r"(?P<scheme>tcp|tls|wss?)://(?P<host>\[[0-9a-fA-F:.]+\]|[^:/\[\]\s]+):(?P<port>[0-9]{1,5})"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embed` subcommand."""
    parser = subparsers.add_parser(
        "embed",
        help="embed active messages that lack a vector (resumable)",
        description="Embed every active message document without a vector for its current "
        "text in the configured generation, in batches whose outcome is committed at once. "
        "Safe to interrupt and re-run: leases of a dead run are reclaimed, succeeded "
        "documents are never embedded again. An endpoint outage charges no attempt; a run "
        "stops after 3 batches fail in a row and exits 1 (the next run resumes). Shows a "
        "progress bar, then counts by state.",
    )
    parser.add_argument(
        "--max-items",
        type=whole_number(1),
        default=None,
        metavar="N",
        help="stop after claiming N items (at least 1)",
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="first make the terminal_failed items pending again (documents the endpoint "
        "rejected, or returned invalid vectors for, SLACKQUERY_EMBEDDING_MAX_ATTEMPTS times)",
    )
    add_dask_flags(parser)
    add_engine_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)
    writes_the_pipeline(parser, "an embed run")


def add_dask_flags(parser: argparse.ArgumentParser) -> None:
    """`--dask-workers` / `--dask-address`: where the embed flow runs its batches."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--dask-workers",
        type=whole_number(1),
        default=None,
        metavar="N",
        help="embed on a local Dask cluster of N (at least 1) single-threaded worker processes",
    )
    group.add_argument(
        "--dask-address",
        type=scheduler_address,
        default=None,
        metavar="ADDRESS",
        help="embed on the Dask cluster whose scheduler listens here (tcp://HOST:PORT, or "
        "tls://, ws://, wss://; e.g. tcp://10.0.0.5:8786)",
    )


def scheduler_address(value: str) -> str:
    """An argparse type: a Dask scheduler's address, SCHEME://HOST:PORT. Dask itself
    refuses a malformed one only once the flow runs, with two tracebacks."""
    match = _SCHEDULER_ADDRESS.fullmatch(value)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a scheduler address: use tcp://HOST:PORT (or tls://, ws://, "
            "wss://), e.g. tcp://10.0.0.5:8786"
        )
    return value


def uses_dask(args: argparse.Namespace) -> bool:
    """Whether a Dask cluster was asked for; refuses the plain engine, which has none, and,
    before the flow and its temporary Prefect API start, a scheduler address where no Dask
    scheduler answers (nothing listening, or another service: the dashboard's port)."""
    wanted = bool(args.dask_workers or args.dask_address)
    if wanted and args.engine == "plain":
        raise SlackqueryError("--dask-workers/--dask-address need the Prefect engine")
    if args.dask_address:
        from flows.embed import ensure_dask_scheduler  # imports Prefect and Dask: only here

        ensure_dask_scheduler(args.dask_address)
    return wanted


def _format(result: dict[str, Any]) -> str:
    counts = result["counts"]
    lines = [
        f"generation  {result['generation_id']}",
        f"this run    {result['claimed']} claimed, {result['succeeded']} embedded, "
        f"{result['failed']} failed in {result['elapsed_s']} s "
        f"(model {result['model_s']} s)",
        "state       " + ", ".join(f"{state} {count}" for state, count in counts.items()),
        f"coverage    {result['embedded_documents']}/{result['wanted_documents']} "
        f"active messages ({result['coverage']:.1%})",
    ]
    if result["retried_failed"]:
        lines.insert(1, f"retried     {result['retried_failed']} terminal_failed item(s)")
    if counts["retryable_failed"] and result["next_retry_at"]:
        first = result["next_retry_at"]  # a datetime, or its ISO text when Prefect returns it
        lines.append(
            f"waiting     {counts['retryable_failed']} retryable_failed item(s); the first is "
            f"due at {str(first)[:19].replace('T', ' ')} UTC, for a later run"
        )
    if result["stopped"]:
        lines.append(f"stopped     {result['stopped']}; the next run resumes")
    elif counts["terminal_failed"]:
        lines.append(
            f"failed      {counts['terminal_failed']} item(s) terminal_failed; "
            "`slackquery embed --retry-failed` tries them again"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the embed flow or loop; exit 1 when it stopped early (the endpoint kept failing)
    or items ended terminal_failed."""
    progress = shows_progress(args)
    if use_prefect(args, dask=uses_dask(args)):
        from flows.embed import with_dask

        # The flow reads the same settings from the environment (keys stay out of Prefect).
        embed_flow = with_dask(args.dask_workers, args.dask_address)
        result = embed_flow(
            max_items=args.max_items, progress=progress, retry_failed=args.retry_failed
        )
    else:
        from slackquery.embedding.work import embed_pending

        result = embed_pending(
            settings, progress=progress, max_items=args.max_items, retry_failed=args.retry_failed
        )
    emit(args, result, _format(result))
    return 1 if result["stopped"] or result["counts"]["terminal_failed"] else 0
