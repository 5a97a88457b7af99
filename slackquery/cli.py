"""The `slackquery` console command: one subcommand per pipeline step.

Each subcommand lives in `slackquery/commands/<name>.py` and exposes
`register(subparsers)`, which adds its parser and sets `handler`. Handlers return a
result; `SlackqueryError` becomes a one-line `error: …` on stderr and exit status 1.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from slackquery import __version__
from slackquery.errors import SlackqueryError
from slackquery.settings import get_settings

# Order is the order `--help` lists them: the pipeline from input to answers.
COMMAND_MODULES = (
    "sample",
    "importer",
    "sync",
    "project",
    "embed",
    "embedding_status",
    "embed_server",
    "build",
    "publish",
    "artifacts",
    "rollback",
    "reconcile",
    "search",
    "ask",
    "verify",
    "serve",
    "access",
    "bench",
    "show_settings",
    "eval",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="slackquery",
        description="Search Slack history offline: import an export, project it with dbt, "
        "embed it, build a validated artifact, publish it, then search it from the CLI "
        "or over MCP. Settings come from SLACKQUERY_* environment variables "
        "(see `slackquery settings`).",
    )
    parser.add_argument("--version", action="version", version=f"slackquery {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"slackquery.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args, get_settings()) or 0
    except SlackqueryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`slackquery search … | head`): not a failure of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
