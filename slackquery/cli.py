"""The `slackquery` console command: one subcommand per pipeline step.

Each subcommand lives in `slackquery/commands/<name>.py` and exposes
`register(subparsers)`, which adds its parser and sets `handler`. Handlers return a
result; `SlackqueryError`, and a storage failure (`io_failure`: a full disk, a read-only
or forbidden file), become a one-line `error: …` on stderr (with the error's notes after
it; under `--json` also `{"error": …}` on stdout) and exit status 1. A usage error is
argparse's, exit status 2 (under `--json` also a document). Any other exception is a bug
and keeps its traceback.
"""

import argparse
import errno
import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

from pydantic import ValidationError

from slackquery import __version__, interrupts
from slackquery.commands import (
    emit,
    exclusions_apart,
    pipeline_writer,
    reader_gone,
    with_exclusions,
)
from slackquery.errors import SlackqueryError
from slackquery.escaping import json_text, terminal_line
from slackquery.settings import Settings, get_settings

# The OS errors by which storage, not the code, refuses a command; the first three only
# ever come from writing.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# EPERM: what an immutable folder (`chattr +i`) answers a new file in it; ENAMETOOLONG: a
# name the file system cannot hold (a path given, or a file Slackquery puts beside it).
STORAGE_ERRNOS = (*WRITE_ERRNOS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG)
# How DuckDB's I/O errors name the file: `Could not write file "<path>": <strerror>`.
_DUCKDB_FILE = re.compile(r'file "([^"]*)"')
# DuckDB's IOException wordings for a read or write that the storage refused.
_DUCKDB_STORAGE = re.compile(r"Could not (?:read|write|truncate|fsync|sync)|Input/output error")

# Command -> its module; the order is the order `--help` lists them: the pipeline from
# input to answers.
COMMAND_MODULES = {
    "sample": "sample",
    "import": "importer",
    "sync": "sync",
    "project": "project",
    "embed": "embed",
    "embedding-status": "embedding_status",
    "embed-server": "embed_server",
    "build": "build",
    "publish": "publish",
    "artifacts": "artifacts",
    "rollback": "rollback",
    "reconcile": "reconcile",
    "backup": "backup",
    "scopes": "scopes",
    "search": "search",
    "thread": "thread",
    "ask": "ask",
    "verify": "verify",
    "serve": "serve",
    "access": "access",
    "bench": "bench",
    "settings": "show_settings",
    "eval": "eval",
}


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors under `--json` are also a document on stdout.

    Every parser of one command line (the command's is made by `add_subparsers` of this
    class) is told by `parse_arguments` whether that line asked for JSON; a handler's own
    usage error (`args.usage_error`) goes through the same parser."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            document = json.dumps({"error": message, "exit_status": 2}, ensure_ascii=False)
            print(json_text(document), flush=True)
        super().error(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with `command` registered, or every subcommand when `command`
    is None or unknown (help, typos). Importing all command modules (pandas, SciPy,
    the Slack client) took ~4 s, most of a cold `slackquery search`."""
    parser = CommandParser(
        prog="slackquery",
        description="Search Slack history offline: import an export, project it with dbt, "
        "embed it, build a validated artifact, publish it, then search it from the CLI "
        "or over MCP. Settings come from SLACKQUERY_* environment variables "
        "(see `slackquery settings`).",
    )
    parser.add_argument("--version", action="version", version=f"slackquery {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    modules = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else COMMAND_MODULES.values()
    for name in modules:
        importlib.import_module(f"slackquery.commands.{name}").register(subparsers)
    for command_parser in subparsers.choices.values():
        command_parser.set_defaults(command_parser=command_parser)
    return parser


def settings_from_environment() -> Settings:
    """`get_settings()`, with a malformed SLACKQUERY_* value as one line naming the variable."""
    try:
        return get_settings()
    except ValidationError as error:
        problems = "; ".join(
            f"SLACKQUERY_{'_'.join(map(str, item['loc'])).upper()}={item.get('input')!r}: "
            + item["msg"].removeprefix("Value error, ")
            for item in error.errors(include_url=False)
        )
        raise SlackqueryError(f"invalid setting: {problems}") from None


def _storage_line(code: int, path: object) -> str:
    """`no space left on device writing <path>`, `permission denied: <path>`."""
    reason = os.strerror(code).lower()
    if path is None:
        return reason
    return f"{reason} writing {path}" if code in WRITE_ERRNOS else f"{reason}: {path}"


def io_failure(error: Exception) -> str | None:
    """The one line to show for a storage failure, or None for any other error.

    Storage failures are OSErrors of `STORAGE_ERRNOS` and DuckDB's I/O errors (its
    IOException, or any DuckDB error caused by one of those OS errors, such as a commit
    that could not write its log). duckdb is looked up, not imported: an error can only
    be DuckDB's once a command has imported it, and most commands start without it.
    """
    if isinstance(error, OSError):
        return _storage_line(error.errno, error.filename) if error.errno in STORAGE_ERRNOS else None
    duckdb = sys.modules.get("duckdb")
    if duckdb is None or not isinstance(error, duckdb.Error):
        return None
    message = str(error)
    code = next((code for code in STORAGE_ERRNOS if os.strerror(code) in message), None)
    if code is not None:
        file = _DUCKDB_FILE.search(message)
        return _storage_line(code, file[1] if file else None)
    # DuckDB's own message of a failed read or write, often several lines, kept on one.
    # Its other IOExceptions ("No files found that match the pattern") can come of a bug.
    storage = isinstance(error, duckdb.IOException) and _DUCKDB_STORAGE.search(message)
    return " ".join(message.split()) if storage else None


# How long a stopped command may take to clean up before the kernel ends the process, as
# SIGKILL would (the stores are made for a killed run): DuckDB 1.5.5 can spin for good
# cleaning up a query a signal ended (about 1 run in 10 here), a core busy and the
# pipeline lock held, where no Python handler runs again.
STOP_GRACE_S = 60


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager's stop, `kill`), raised where the command is, so that it
    cleans up as after Ctrl-C: a build records itself interrupted and removes its
    candidate, an embed run hands back its claims. Without it the process just ended."""


def _terminate(signum: int, frame: object) -> None:
    _end_after_grace()
    raise Terminated


def _interrupt(signum: int, frame: object) -> None:
    _end_after_grace()
    raise KeyboardInterrupt


def _end_after_grace() -> None:
    """Have the kernel end the process STOP_GRACE_S from now (SIGALRM's default action),
    left armed when `main` returns: a hang can come as late as the interpreter's exit."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(STOP_GRACE_S)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    # Importing Prefect in a terminal otherwise writes a device id under ~/.prefect and
    # sends a first-use event: Slackquery reaches nothing its settings do not name.
    if not os.environ.get("DO_NOT_TRACK"):
        os.environ["DO_NOT_TRACK"] = "1"
    try:  # the command's modules take a second or more to import
        args = parse_arguments(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    try:
        os.getcwd()
    except FileNotFoundError:  # dbt, among others, ended in a traceback there
        print("error: the current folder was removed; change to one that exists", file=sys.stderr)
        return 1
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, _terminate),
        signal.SIGINT: signal.signal(signal.SIGINT, _interrupt),
    }
    try:
        return _run(args)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def parse_arguments(words: list[str]) -> argparse.Namespace:
    """The command line parsed by the parser of the command it names; a usage error exits
    with status 2 under the usage of the parser the wrong word was meant for."""
    # The top-level options take no values, so the first other word names the command.
    command = next((word for word in words if not word.startswith("-")), None)
    parser = build_parser(command)
    _json_errors(parser, command, words)
    before_command = words[: words.index(command)] if command else words
    options = parser._option_string_actions
    stray = [  # what argparse would take: an option, or a long one's prefix (`--vers`)
        word
        for word in before_command
        if word not in options
        and not (word.startswith("--") and any(option.startswith(word) for option in options))
    ]
    if stray:  # `slackquery --bogus search`: not search's option
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    words, exclusions = exclusions_apart(parser, command, words)
    args, unknown = parser.parse_known_args(words)
    if unknown:  # argparse reports them under the top-level usage, which lists no option
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    with_exclusions(args, exclusions)
    return args


def _json_errors(parser: argparse.ArgumentParser, command: str | None, words: list[str]) -> None:
    """Tell every parser whether `words` ask for JSON: `--json` before any `--`, unless the
    command's `--json` takes a value (`eval --json OUT` names a file). An unknown command
    cannot say, so the word alone decides there."""
    options = words[: words.index("--")] if "--" in words else words
    if "--json" not in options:
        return
    named = _subparsers(parser).get(command)
    flag = named._option_string_actions.get("--json") if named else None
    if flag is not None and flag.nargs != 0:
        return
    for each in _every_parser(parser):
        each.json_errors = True


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of `parser`'s subcommands (`access`'s actions, say), by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def _every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for each in _subparsers(parser).values():
        yield from _every_parser(each)


def _run(args: argparse.Namespace) -> int:
    """The command's exit status, every failure of it one line on stderr."""
    try:
        settings = settings_from_environment()
        with pipeline_writer(args, settings), interrupts.as_raised():
            return args.handler(args, settings) or 0
    except SlackqueryError as error:
        return _failed(args, str(error), error, 1)
    except BrokenPipeError:  # output not written through `emit`
        reader_gone()
        return 0
    except Terminated as error:
        return _failed(args, "terminated", error, 128 + signal.SIGTERM)
    except KeyboardInterrupt as error:
        return _failed(args, "interrupted", error, 130)
    except Exception as error:
        line = io_failure(error)
        if line is None:
            raise
        return _failed(args, line, error, 1)


def _failed(args: argparse.Namespace, line: str, error: BaseException, status: int) -> int:
    """Print `error: LINE` on stderr with the error's notes (say, the reconcile step it
    stopped in) after it, and under `--json` the same as `{"error": …}` on stdout, for a
    script that reads only stdout; return `status`. Errors quote input and archive names
    back: escaped, and so one line."""
    said = "; ".join([line, *getattr(error, "__notes__", ())])
    print(f"error: {terminal_line(said)}", file=sys.stderr)
    if getattr(args, "json", None) is True:  # the flag (`eval --json OUT` names a file)
        emit(args, {"error": said, "exit_status": status}, said)
    return status


if __name__ == "__main__":
    sys.exit(main())
