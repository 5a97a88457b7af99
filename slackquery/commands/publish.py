"""`slackquery publish BUILD`: make a validated artifact the one serving reads."""

import argparse
from pathlib import Path
from typing import Any

from slackquery.artifacts.files import build_id_of
from slackquery.artifacts.publish import publish
from slackquery.commands import add_json_flag, emit, writes_the_pipeline
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
    writes_the_pipeline(parser, "a publish")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Publish one build."""
    result = publish(settings, args.build)
    emit(args, result, render(result))
    return 0


def previous_build(result: dict[str, Any]) -> str | None:
    """The build id of the artifact that was current before (`previous` is its file name),
    or None when nothing was published."""
    previous = result["previous"]
    return None if previous is None else build_id_of(Path(previous)) or previous


def render(result: dict[str, Any]) -> str:
    """One line: what is current now, how it was validated, what it replaced. Publishing
    the build that is already current re-checks it and keeps it, which the line says
    rather than naming the build as its own predecessor."""
    build_id, previous = result["build_id"], previous_build(result)
    reused = result["validation"]["reused"]
    if previous == build_id:
        validation = "its validation still holds" if reused else "validated again"
        text = f"{build_id} was already published and stays current (seal re-checked, {validation})"
    else:
        validation = "build's validation reused" if reused else "validated"
        text = f"published {build_id} ({validation}; previous: {previous or 'none'})"
    removed = result["retention"]["removed"]
    return text + (f"; retention removed {len(removed)} file(s)" if removed else "")
