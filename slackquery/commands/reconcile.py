"""`slackquery reconcile`: run the `reconcile` flow once, in this process.

Engine choice as for `embed` (`slackquery.commands.add_engine_flag`): the Prefect flow when
a Prefect API is configured, otherwise the same steps as plain Python; `--dask-workers` /
`--dask-address` (Prefect only) run the embedding batches on Dask.
"""

import argparse

from slackquery.commands import add_engine_flag, add_json_flag, emit, use_prefect
from slackquery.commands.embed import add_dask_flags, uses_dask
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `reconcile` subcommand."""
    parser = subparsers.add_parser(
        "reconcile",
        help="project, embed, build, validate and publish once (skips when unchanged)",
        description="Run the Prefect flow `reconcile` once: dbt projection, embedding of new "
        "or changed documents, then a new validated artifact published atomically. The build "
        "is skipped when neither the source watermark nor the embedding generation changed "
        "since the published artifact. Only one reconcile runs at a time. prefect.yaml "
        "schedules the same flow hourly; without PREFECT_API_URL the command runs the same "
        "steps as plain Python (no temporary Prefect API).",
    )
    parser.add_argument(
        "--full-refresh", action="store_true", help="rebuild every dbt model from scratch"
    )
    parser.add_argument(
        "--force-build",
        action="store_true",
        help="build a new artifact even when nothing changed",
    )
    add_dask_flags(parser)
    add_engine_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the flow and report what it did."""
    # Prefect's import costs seconds; only this command pays it.
    from flows.reconcile import reconcile, reconcile_plain

    if uses_dask(args) or use_prefect(args):
        result = reconcile(
            full_refresh=args.full_refresh,
            force_build=args.force_build,
            dask_workers=args.dask_workers,
            dask_address=args.dask_address,
        )
    else:
        result = reconcile_plain(full_refresh=args.full_refresh, force_build=args.force_build)
    status = result["status"]
    if status == "skipped":
        text = f"reconcile skipped: {result['reason']}"
    elif status == "unchanged":
        text = f"reconcile: nothing changed; {result['build_id']} stays published"
    else:
        text = f"reconcile: published {result['build_id']}"
    emit(args, result, text)
    return 0
