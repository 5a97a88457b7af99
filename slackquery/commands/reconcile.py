"""`slackquery reconcile`: run the Prefect `reconcile` flow once, in this process."""

import argparse

from slackquery.commands import add_json_flag, emit
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
        "schedules the same flow hourly.",
    )
    parser.add_argument(
        "--full-refresh", action="store_true", help="rebuild every dbt model from scratch"
    )
    parser.add_argument(
        "--force-build",
        action="store_true",
        help="build a new artifact even when nothing changed",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the flow and report what it did."""
    from flows.reconcile import reconcile  # Prefect's import costs seconds; only this pays.

    result = reconcile(full_refresh=args.full_refresh, force_build=args.force_build)
    status = result["status"]
    if status == "skipped":
        text = f"reconcile skipped: {result['reason']}"
    elif status == "unchanged":
        text = f"reconcile: nothing changed; {result['build_id']} stays published"
    else:
        text = f"reconcile: published {result['build_id']}"
    emit(args, result, text)
    return 0
