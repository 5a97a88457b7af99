"""`slackquery backup DEST`: copy what a home cannot make again into a new folder."""

import argparse
from pathlib import Path
from typing import Any

from slackquery.backup import back_up
from slackquery.commands import add_json_flag, emit, shows_progress, step_status
from slackquery.settings import Settings

# The copy is made and usable, but a part was left out as damaged: not 0, so that a
# scheduled backup's own alert fires (as rsync's partial transfer is 23); not 1, which says
# no copy was made.
LEFT_OUT_EXIT = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `backup` subcommand."""
    parser = subparsers.add_parser(
        "backup",
        help="copy the canonical store, state, grants and published artifact to a new folder",
        description="Copy what this home cannot make again (the canonical store, the state "
        "database with its vectors and build history, the access grants, the cursor key, "
        "and the published artifact with its seal) into DEST, a folder that must not exist. "
        "DEST is itself a home: `SLACKQUERY_HOME=DEST slackquery serve` serves it, and "
        "`reconcile` there goes on from it. Import, sync, project, embed, build, publish and "
        "rollback are kept out while the copy is taken, and reconcile skips its run (one "
        "already running makes the backup fail at once); search and serve go on. The copy "
        "of the artifact is checked against its seal (a published artifact that does not "
        "match it, damaged, is left out, and the line says so, as is a database DuckDB "
        "cannot read: the rest is still copied), and DEST appears only once complete. Exit "
        "status 0 when everything was copied, 3 when a damaged part was left out (1 is an "
        "error: no copy was made).",
    )
    parser.add_argument("destination", metavar="DEST", type=Path, help="a new folder")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Take one backup and say what it holds."""
    destination = args.destination.absolute()  # the hint works from any folder
    with step_status(shows_progress(args), "backup") as step:
        record = back_up(settings, destination, step)
    emit(args, {**record, "destination": str(destination)}, render(destination, record))
    return LEFT_OUT_EXIT if record["left_out"] else 0


def render(destination: Path, record: dict[str, Any]) -> str:
    """Where the copy is, what it holds (or left out), and how to use it."""
    head = f"backed up {record['source_home']} to {destination}: {len(record['files'])} files"
    lost = record["left_out"] or record["missing_from_home"]
    published = record["published_build"] or ("none" if lost else "none (nothing was published)")
    lines = [f"{head}, published artifact {published}"]
    lines += [f"  left out {part}" for part in record["left_out"]]
    # With no artifact in the copy, serve has nothing to answer from until a reconcile there.
    use = "serve" if record["published_build"] else "reconcile, then serve"
    lines.append(
        f"  use it: SLACKQUERY_HOME={destination} slackquery {use} (or copy it back as the home)"
    )
    lines += [
        f"  not in the home, so not in the backup: {part}" for part in record["missing_from_home"]
    ]
    lines += [
        f"  removed {name}, the partial copy of a backup that was killed"
        for name in record["removed_partial_copies"]
    ]
    return "\n".join(lines)
