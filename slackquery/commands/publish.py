"""`slackquery publish BUILD`: make a validated artifact the one serving reads."""

import argparse

from slackquery.artifacts.publish import publish
from slackquery.commands import add_json_flag, emit
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `publish` subcommand."""
    parser = subparsers.add_parser(
        "publish",
        help="atomically point `current` at a validated artifact",
        description="Check a validated build's seal (manifest, sha256 of the file and its "
        "arrays, the file's sha256 against the build history, metadata), run the full Great "
        "Expectations checkpoint again in a fresh read-only process unless the build's "
        "result still holds (same published artifact compared with, same drift settings, "
        "same checks), then swap artifacts/current.duckdb to it atomically (readers with an "
        "open connection keep their file), record it in the build history and apply "
        "retention. A refusing checkpoint run is kept in search-<build_id>.refused."
        "validation.json; the build's own result is left as it was.",
    )
    parser.add_argument(
        "build",
        metavar="BUILD",
        help="build id (see `slackquery artifacts`), or `latest` for the newest validated build",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Publish one build."""
    result = publish(settings, args.build)
    removed = result["retention"]["removed"]
    validation = "build's validation reused" if result["validation"]["reused"] else "validated"
    text = (
        f"published {result['build_id']} ({validation}; previous: {result['previous'] or 'none'})"
        + (f"; retention removed {len(removed)} file(s)" if removed else "")
    )
    emit(args, result, text)
    return 0
