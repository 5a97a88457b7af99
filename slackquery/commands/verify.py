"""`slackquery verify TEXT|-`: check every citation of a drafted answer."""

import argparse
import sys

from serving.answer_models import VerificationResponse
from serving.answers import verify_citations
from serving.engine import SearchEngine
from slackquery.commands import add_json_flag, add_requester_flags, emit, requester_from
from slackquery.escaping import terminal_line
from slackquery.settings import Settings

# Not 1 (an error) or 2 (argparse's usage error): a script tells a draft that failed its
# check from a check that could not run.
UNVERIFIED_EXIT = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `verify` subcommand."""
    parser = subparsers.add_parser(
        "verify",
        help="check the citations of a drafted answer against the published archive",
        description="Find every [document_id], Slack permalink and message id in the text and "
        "check that each exists in the current artifact, is visible, still active and (with "
        "--cited-at) unchanged since that artifact, exactly as the MCP tool verify_citations "
        "does. Exit status 0 when verified, 3 when not (1 is an error, 2 a usage error).",
    )
    parser.add_argument("text", help="the drafted answer, or - to read it from stdin")
    parser.add_argument(
        "--cited-at", metavar="BUILD_ID", help="artifact id the citations were taken from"
    )
    add_requester_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Verify and print; exit `UNVERIFIED_EXIT` when the answer is not verified."""
    text = sys.stdin.read() if args.text == "-" else args.text
    engine = SearchEngine(settings)
    try:
        response = verify_citations(
            engine, text, args.cited_at, requester=requester_from(args, settings)
        )
    finally:
        engine.close()
    emit(args, response.model_dump(mode="json"), render(response))
    return 0 if response.verdict == "verified" else UNVERIFIED_EXIT


def render(response: VerificationResponse) -> str:
    """One line per citation, then the verdict; escaped for the terminal, since a citation
    is quoted as the drafted text wrote it."""
    lines = []
    for check in response.citations:
        status = "ok" if not check.problems else "; ".join(check.problems)
        lines.append(f"{check.cited} ({check.kind}): {status}")
    lines += [f"problem: {problem}" for problem in response.problems]
    lines += [f"cites nothing: {sentence}" for sentence in response.uncited_sentences]
    lines.append(f"{response.verdict} against artifact {response.artifact_id}")
    return "\n".join(map(terminal_line, lines))
