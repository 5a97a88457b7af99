"""Subcommands of the `slackquery` CLI, one module each, and their shared output helpers."""

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

from serving.cursor import home_secret
from slackquery.artifacts import files
from slackquery.escaping import json_text
from slackquery.settings import Settings

# Without SLACKQUERY_CURSOR_SECRET each process would sign with a random key, and the
# `more: --cursor …` one command prints would be refused by the next, or by `serve`.
CURSOR_KEY_NAME = "cursor.key"


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Give a reporting command the `--json` flag (one JSON document on stdout)."""
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document on stdout instead of text"
    )


class _JoinedWords(argparse.Action):
    """Stores the words of an `nargs="+"` argument joined by spaces."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, " ".join(values))


def writes_the_pipeline(parser: argparse.ArgumentParser, what: str) -> None:
    """Mark a command that writes the state database or the artifacts: it runs holding
    `files.pipeline_lock`, named `what` (`a build`) to whom it refuses (`pipeline_writer`,
    around every command's handler)."""
    parser.set_defaults(pipeline_writer=what)


@contextmanager
def pipeline_writer(args: argparse.Namespace, settings: Settings) -> Iterator[None]:
    """Hold the pipeline lock while a command `writes_the_pipeline` runs."""
    what = getattr(args, "pipeline_writer", None)
    if what is None:
        yield
        return
    with files.pipeline_lock(settings.home, files.holder_name(what)):
        yield


def add_text_argument(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """A positional text of one or more words: `search why was the api down` is the query
    `why was the api down`, as if quoted; `exclusions_apart` keeps `-word` in it too."""
    parser.add_argument(name, nargs="+", action=_JoinedWords, help=help)
    parser.set_defaults(text_argument=name)


# Slack's exclusions, `-word` and `-"a phrase"`, which argparse would take for options: a
# dash and then no space, digit, dot or dash (`-5`, `-.5` are numbers, `--x` an option).
_EXCLUSION = re.compile(r"-[^\s\d.-].*", re.DOTALL)


def exclusions_apart(
    parser: argparse.ArgumentParser, command: str | None, words: list[str]
) -> tuple[list[str], list[str]]:
    """`words` without the exclusions typed unquoted after a text argument's command
    (`search deploy -rollback`), and those exclusions, for `with_exclusions` to add back.

    An option's value (`--in -x`), `-h` and whatever follows `--` stay where they are. A
    query of exclusions alone keeps its first one, after a `--`, as the text argument."""
    commands = parser._subparsers._group_actions[0].choices if parser._subparsers else {}
    subparser = commands.get(command)
    if subparser is None or subparser.get_default("text_argument") is None:
        return words, []
    options = subparser._option_string_actions
    kept: list[str] = []
    taken: list[str] = []
    takes_value = False
    positionals = 0  # the command, then the text argument's words
    for index, word in enumerate(words):
        if word == "--":
            return kept + words[index:], taken
        if not takes_value and word not in options and _EXCLUSION.fullmatch(word):
            taken.append(word)
            continue
        if takes_value and word.startswith("-") and word not in options:
            # argparse takes `--in -x` for two options; `--in=-x` is the value it means
            # (`--in --json` stays two options, and argparse says --in lacks its value).
            kept[-1] = f"{kept[-1]}={word}"
            takes_value = False
            continue
        kept.append(word)
        action = options.get(word)
        positionals += not takes_value and action is None and not word.startswith("-")
        takes_value = action is not None and action.nargs != 0
    if taken and positionals < 2:
        return [*kept, "--", taken[0]], taken[1:]
    return kept, taken


def with_exclusions(args: argparse.Namespace, exclusions: list[str]) -> None:
    """Add the exclusions `exclusions_apart` took out back to the text argument."""
    if exclusions:
        name = args.text_argument
        setattr(args, name, " ".join([getattr(args, name), *exclusions]))


def iso_day(value: str) -> date:
    """An argparse type: a calendar day written YYYY-MM-DD."""
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a day; use YYYY-MM-DD") from None


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `minimum` (to `maximum`, when given), so that
    an out-of-range count is a usage error (exit 2) before any work starts."""
    bounds = f"of at least {minimum:,}" if maximum is None else f"from {minimum:,} to {maximum:,}"

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < minimum or (maximum is not None and number > maximum):
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number {bounds}")
        return number

    return parse


def positive_float(value: str) -> float:
    """An argparse type: a finite number above zero."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number above 0")
    return number


def emit(args: argparse.Namespace, result: Any, text: str) -> None:
    """Print `result` as JSON when `--json` was given, else the human-readable `text`.

    A reader that went away is no failure of the command, whose exit status still says
    what it found (`verify … | grep -q`, under `pipefail`, must not pass a failed check)."""
    try:
        if getattr(args, "json", False):
            document = json.dumps(result, indent=2, default=str, ensure_ascii=False)
            sys.stdout.write(json_text(document) + "\n")
        else:
            print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


def shows_progress(args: argparse.Namespace) -> bool:
    """Whether a long command draws a progress bar: on a terminal, never into a log or
    under `--json`."""
    return not getattr(args, "json", False) and sys.stderr.isatty()


@contextmanager
def step_status(shown: bool, command: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr naming the command's current step, where `shown`."""
    if not shown:
        yield lambda _step: None
        return
    from rich.console import Console

    with Console(stderr=True).status(f"{command}: starting") as status:
        yield lambda step: status.update(f"{command}: {step}")


def reader_gone() -> None:
    """Send the rest of stdout nowhere: the reader went away (`slackquery search … | head`),
    and the interpreter's last flush must not fail on it."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def add_page_flags(parser: argparse.ArgumentParser, what: str, maximum: int, same: str) -> None:
    """`--limit` (`what` per page, default 200, at most `maximum`) and `--cursor` (the
    previous page's `next_cursor`, given with the `same` arguments)."""
    parser.add_argument(
        "--limit",
        type=whole_number(1, maximum),
        default=200,
        help=f"{what} per page (default 200, at most {maximum})",
    )
    parser.add_argument("--cursor", help=f"next_cursor of a previous page (same {same})")


def add_requester_flags(parser: argparse.ArgumentParser) -> None:
    """Give a lookup command `--as` (see what one Slack user would see) and its options."""
    parser.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="act as this Slack user (U…, @name or name), as their grant would (default: "
        "the local operator, who sees everything)",
    )
    parser.add_argument(
        "--as-workspace", metavar="WORKSPACE", help="the --as user's workspace, when ambiguous"
    )
    parser.add_argument(
        "--as-no-dms", action="store_true", help="with --as: as a grant made with --no-dms"
    )
    # argparse has no option that requires another, so `requester_from` checks once every
    # word is parsed, and needs this parser's usage line for the exit-2 error.
    parser.set_defaults(requester_usage_error=parser.error)


def requester_from(args: argparse.Namespace, settings: Any) -> Any:
    """The `Requester` that `--as` names, or None for the local operator."""
    if args.as_user is not None and not args.as_user.strip():
        args.requester_usage_error("--as needs a user id or @name")
    if not args.as_user:
        # Ignoring them would act as the local operator, who sees every DM: the opposite
        # of what `--as-no-dms` asks for.
        if args.as_workspace is not None:
            args.requester_usage_error("--as-workspace applies to --as")
        if args.as_no_dms:
            args.requester_usage_error("--as-no-dms applies to --as")
        return None
    from serving.access import published_requester

    return published_requester(settings, args.as_user, args.as_workspace, args.as_no_dms)


def add_engine_flag(parser: argparse.ArgumentParser) -> None:
    """Give a command that wraps a Prefect flow the `--engine` choice.

    Without a Prefect server, a flow run starts a temporary local API first (~20 s), which
    dwarfs a quick run; the durable state lives in the state DB either way, so plain Python
    runs the same steps with the same guarantees.
    """
    parser.add_argument(
        "--engine",
        choices=("auto", "prefect", "plain"),
        default="auto",
        help="run as a Prefect flow, as plain Python, or Prefect only when PREFECT_API_URL "
        "is set or a Dask cluster is asked for, which only the flow can use (default: auto)",
    )


def use_prefect(args: argparse.Namespace, *, dask: bool = False) -> bool:
    """Whether the run is a Prefect flow run: `--engine` asks for one (auto: only when an
    API is configured), or `dask`, a Dask cluster, which only the flow fans out to.

    When it does, the temporary API a run without a server starts sends no usage data
    (Prefect's default at server start): Slackquery reaches nothing outside the machine
    but the services its settings name, and the attempt logged a long traceback whenever
    two temporary APIs shared Prefect's database. An operator's own setting wins."""
    chosen = (
        dask
        or args.engine == "prefect"
        or (args.engine == "auto" and bool(os.environ.get("PREFECT_API_URL")))
    )
    if chosen:
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return chosen


def with_kept_cursor_key(settings: Settings) -> Settings:
    """The settings with the cursor key kept in SLACKQUERY_HOME when none is configured, so
    that the next command accepts the cursor this one prints. Where it cannot be kept the
    process signs with a random key, and its cursors die with it (`cursor_secret` None)."""
    if settings.cursor_secret is not None:
        return settings
    secret = home_secret(settings.home / CURSOR_KEY_NAME)
    return settings.model_copy(update={"cursor_secret": secret})
