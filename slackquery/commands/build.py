"""`slackquery build`: write and validate a new immutable search artifact (not published)."""

import argparse

from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.files import artifact_file, manifest_file
from slackquery.artifacts.files import read_json as read_manifest
from slackquery.commands import (
    add_json_flag,
    emit,
    shows_progress,
    step_status,
    writes_the_pipeline,
)
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `build` subcommand."""
    parser = subparsers.add_parser(
        "build",
        help="build and validate a new search artifact from the state database",
        description="Copy the active documents, their vectors and scope listings from the "
        "state database into a new search-<build_id>.duckdb, build its full-text index with "
        "the dbt macro, validate it with Great Expectations in a fresh read-only process, "
        "then checksum it and write its manifest. Refuses unless every active message has a "
        "vector of the current embedding generation (or the share that "
        "SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE sets, e.g. 0.5; 0 builds before any "
        "embedding). Does not publish: see `publish`.",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)
    writes_the_pipeline(parser, "a build")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Build one artifact and report its id, counts and checksum."""
    with step_status(shows_progress(args), "build") as step:
        build_id = build_artifact(settings, step)
    manifest = read_manifest(manifest_file(settings.artifact_path, build_id))
    counts = manifest["counts"]
    text = (
        f"built {build_id}: {counts['document_count']} documents "
        f"({counts['message_count']} messages, {counts['thread_context_count']} thread "
        f"contexts), {counts['vector_count']} vectors\n"
        f"  file     {artifact_file(settings.artifact_path, build_id)}\n"
        f"  sha256   {manifest['checksum_sha256']}\n"
        f"  publish: slackquery publish {build_id}"
    )
    emit(args, manifest, text)
    return 0
