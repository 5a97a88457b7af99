"""`slackquery artifacts`: the build history, with what is current and what is on disk."""

import argparse
from typing import Any

from slackquery.artifacts import history
from slackquery.artifacts.files import artifact_file, pipeline_holder
from slackquery.artifacts.pointer import current_target
from slackquery.commands import add_json_flag, emit, whole_number
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `artifacts` subcommand."""
    parser = subparsers.add_parser(
        "artifacts",
        help="list builds: status, counts, which one is current, which files remain",
        description="List the build history from the state database, newest first, marking "
        "the artifact that artifacts/current.duckdb points to and whether each file is still "
        "retained. Statuses: validated (sealed, never published: what `publish latest` and "
        "`reconcile` publish), published (current), superseded (published once, then "
        "replaced: a rollback target while its file is kept), failed, and interrupted (its "
        "process ended before the build finished; never publishable).",
    )
    parser.add_argument(
        "--limit", type=whole_number(1), default=20, help="most builds to list (default 20)"
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def list_artifacts(settings: Settings, limit: int | None = None) -> list[dict[str, Any]]:
    """Builds newest first, each with `is_current` and `file_exists`; a build whose process
    is gone is `interrupted`, and the pointer's build is the `published` one."""
    if not settings.state_path.exists():
        return []
    conn = open_database(str(settings.state_path), read_only=True, what="state database")
    try:
        rows = history.list_builds(conn, limit=limit) if history.table_exists(conn) else []
    finally:
        conn.close()
    current = current_target(settings.artifact_path)
    for row in rows:
        # A build keeps the state open for writing from recording itself `building` until
        # it records how it ended, and DuckDB lets no other process open a file meanwhile:
        # a `building` row this connection could read was left by a process that died.
        # (The next build or publish records it interrupted.)
        if row["status"] == "building":
            row["status"] = "interrupted"
        path = artifact_file(settings.artifact_path, row["build_id"])
        row["is_current"] = path.name == current
        row["file_exists"] = path.is_file()
        # The pointer is what is served: a publish that died right after swapping it left
        # the history behind until the next publish or reconcile records it.
        if current is not None and row["is_current"]:
            row["status"] = "published"
        elif current is not None and row["status"] == "published":
            row["status"] = "superseded"
    return rows


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Print the build history; not while a pipeline command or reconcile writes the state
    database (opening it meanwhile could fail that writer's next step)."""
    holder = pipeline_holder(settings.home)
    if holder is not None:
        raise SlackqueryError(
            f"{holder} holds the state database: the build history once it is done"
        )
    rows = list_artifacts(settings, args.limit)
    lines = [f"{'':2}{'build id':36} {'status':11} {'documents':>9} {'vectors':>8}  file"]
    for row in rows:
        counts = row["counts_json"] or {}
        lines.append(
            f"{'*' if row['is_current'] else ' ':2}{row['build_id']:36} {row['status']:11} "
            f"{counts.get('document_count', ''):>9} {counts.get('vector_count', ''):>8}  "
            f"{'kept' if row['file_exists'] else '-'}"
            + (f"  {row['error_message'][:80]}" if row["error_message"] else "")
        )
    if not rows:
        lines = ["no builds yet: `slackquery reconcile` builds and publishes one"]
    emit(args, rows, "\n".join(lines))
    return 0
