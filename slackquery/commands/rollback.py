"""`slackquery rollback BUILD`: republish a retained artifact after full validation."""

import argparse
from typing import Any

from slackquery.artifacts.publish import rollback
from slackquery.commands import add_json_flag, emit, writes_the_pipeline
from slackquery.commands.publish import previous_build
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `rollback` subcommand."""
    parser = subparsers.add_parser(
        "rollback",
        help="republish a retained artifact after full re-validation",
        description="Point artifacts/current.duckdb back at a retained artifact, given by "
        "build id, by its file name in the artifact directory or by its path there. The "
        "file's checksum (against its manifest and the build history), the manifest and "
        "every Great Expectations suite are checked first (count drift is not, since a "
        "rollback is deliberate). Files outside the artifact directory, the current.duckdb "
        "pointer and `latest` (a publish reference) are refused. A rollback holds: "
        "`reconcile` publishes nothing while the inputs are those of the build rolled back "
        "from.",
    )
    parser.add_argument(
        "build",
        metavar="BUILD",
        help="build id, search-<build_id>.duckdb or artifact path to restore",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)
    writes_the_pipeline(parser, "a rollback")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Roll back to one retained build."""
    result = rollback(settings, args.build)
    emit(args, result, render(result))
    return 0


def render(result: dict[str, Any]) -> str:
    """`rolled back to B (was: A)`, in build ids as `artifacts` lists them. A rollback to
    the build already current re-checks it and keeps it, which the line says."""
    build_id, previous = result["build_id"], previous_build(result)
    if previous == build_id:
        return f"{build_id} was already current and stays so (seal re-checked, validated again)"
    return f"rolled back to {build_id} (was: {previous or 'none'})"
