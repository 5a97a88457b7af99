"""Subcommands of the `slackquery` CLI, one module each, and their shared output helpers."""

import argparse
import json
import sys
from typing import Any


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give a reporting command the `--json` flag (one JSON document on stdout)."""
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout instead of text"
    )


def emit(args: argparse.Namespace, result: Any, text: str) -> None:
    """Print `result` as JSON when `--json` was given, else the human-readable `text`."""
    if getattr(args, "json", False):
        json.dump(result, sys.stdout, indent=2, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(text)
