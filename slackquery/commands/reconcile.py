"""`slackquery reconcile`: run the `reconcile` flow once, in this process.

Engine choice as for `embed` (`slackquery.commands.add_engine_flag`): the Prefect flow when
a Prefect API is configured, otherwise the same steps as plain Python; `--dask-workers` /
`--dask-address` (Prefect only) run the embedding batches on Dask.
"""

import argparse

from slackquery.commands import (
    add_engine_flag,
    add_json_flag,
    emit,
    shows_progress,
    use_prefect,
)
from slackquery.commands.embed import add_dask_flags, uses_dask
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `reconcile` subcommand."""
    parser = subparsers.add_parser(
        "reconcile",
        help="project, embed, build, validate and publish once (skips when unchanged)",
        description="Run the pipeline's steps once (the `reconcile` flow): dbt projection, "
        "embedding of new or changed documents, then a new validated artifact published "
        "atomically. The build is skipped when neither the source watermark nor the "
        "embedding generation changed since the published artifact and embedding has not "
        "moved on (a partly embedded artifact is built again once embedding has finished, "
        "or has gained 10% of the messages), and while they are those of a build an operator "
        "rolled back from (a rollback holds until new input gives a new build). Nor is it "
        "built while they are those of a build validation refused and nothing that build was "
        "checked against has changed (the published artifact, the count-drift settings, the "
        "checks): the run then fails, as the refusal did, naming that build and why. A "
        "failure names the step it stopped in. Only one reconcile runs at a time. "
        "prefect.yaml schedules the same flow hourly. It runs as a Prefect flow run when "
        "--engine asks for one (auto, the default: when PREFECT_API_URL is set) or a Dask "
        "cluster is asked for; otherwise as plain Python, the same steps without a temporary "
        "Prefect API.",
    )
    parser.add_argument(
        "--full-refresh", action="store_true", help="rebuild every dbt model from scratch"
    )
    parser.add_argument(
        "--force-build",
        action="store_true",
        help="build a new artifact even when nothing changed (or embedding has moved on less "
        "than reconcile rebuilds for), or when validation refused a build of the same inputs "
        "(say, for a cause that has passed)",
    )
    add_dask_flags(parser)
    add_engine_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the flow and report what it did."""
    # Prefect's import costs seconds; only this command pays it.
    from flows.reconcile import reconcile, reconcile_plain, summary

    if use_prefect(args, dask=uses_dask(args)):
        result = reconcile(
            full_refresh=args.full_refresh,
            force_build=args.force_build,
            dask_workers=args.dask_workers,
            dask_address=args.dask_address,
        )
    else:
        result = reconcile_plain(
            full_refresh=args.full_refresh,
            force_build=args.force_build,
            progress=shows_progress(args),
        )
    emit(args, result, summary(result))
    return 0
