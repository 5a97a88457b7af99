"""`slackquery ask "question"`: a cited answer from the published archive, or an abstention."""

import argparse

from serving.answer_models import AnswerResponse
from serving.answers import answer_question
from serving.engine import SearchEngine
from slackquery.commands import (
    add_json_flag,
    add_requester_flags,
    add_text_argument,
    emit,
    requester_from,
    whole_number,
)
from slackquery.commands.search import (
    MAX_RESULTS_DEFAULT,
    add_filter_flags,
    byline,
    check_max_results,
    conversation_label,
    files_line,
    filtered_query,
    in_reply_to_line,
)
from slackquery.escaping import emphasis, terminal_line, terminal_text
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `ask` subcommand."""
    parser = subparsers.add_parser(
        "ask",
        help="answer a question from the archive, citing every claim (or say it cannot)",
        description="Answer a question only from retrieved messages, exactly as the MCP tool "
        "answer_slack_question does: each part of the question gets its best supporting "
        "messages and an extractive answer with [document_id] after every claim; a later "
        "correction wins over what it corrects; parts the archive does not cover are named. "
        "--json prints the evidence pack (verdict, answer, citations, parts, ...).",
    )
    add_text_argument(parser, "question", "the question, in one or more words")
    add_filter_flags(parser)
    parser.add_argument(
        "--max-evidence",
        type=whole_number(1),
        default=12,
        help="supporting messages in all (default 12; at most SLACKQUERY_SEARCH_MAX_RESULTS, "
        f"default {MAX_RESULTS_DEFAULT})",
    )
    add_requester_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run, usage_error=parser.error)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Answer and print."""
    check_max_results(args, "--max-evidence", args.max_evidence, settings)
    engine = SearchEngine(settings)
    try:
        response = answer_question(
            engine,
            filtered_query(args.question, args),
            channel_ids=args.channels,
            author_ids=args.authors,
            workspace_ids=args.workspaces,
            max_evidence=args.max_evidence,
            requester=requester_from(args, settings),
        )
    finally:
        engine.close()
    emit(args, response.model_dump(mode="json"), render(response))
    return 0


def render(response: AnswerResponse) -> str:
    """The answer, then each cited message with its answering sentence highlighted, then
    the notes (what ranking did, a cited lead that holds none of the question's words).

    Everything from the archive or the question is escaped for the terminal; only the
    answer keeps its newlines (one line per part), and the bold goes in after escaping."""
    bold, plain = emphasis()
    lines = [
        terminal_line(f"{response.verdict}: {response.question}"),
        "",
        terminal_text(response.answer),
    ]
    if response.unsupported_parts:
        unsupported = "; ".join(response.unsupported_parts)
        lines += ["", terminal_line(f"not answered by the archive: {unsupported}")]
    for part in response.parts:
        if part.conflict:
            lines.append(terminal_line(f"conflict: {part.conflict}"))
    cited = {citation.document_id for citation in response.citations}
    shown = {
        item.document_id: item
        for part in response.parts
        for item in part.evidence
        if item.document_id in cited
    }
    if shown:
        lines += ["", "sources:"]
    for document_id, item in shown.items():
        lines.append(
            terminal_line(f"[{document_id}] ")
            + byline(
                conversation_label(item.channel_name, item.conversation_type, item.channel_id),
                item.author_name,
                item.timestamp,
            )
        )
        highlighted = terminal_line(" ".join(item.highlighted.split()))
        lines.append("    " + highlighted.replace("**", bold, 1).replace("**", plain, 1))
        lines.extend(files_line(item.files))
        if item.in_reply_to is not None:
            lines.append(in_reply_to_line(item.in_reply_to.author_name, item.in_reply_to.text))
        if item.permalink:
            lines.append(terminal_line(f"    {item.permalink}"))
    lines.extend(terminal_line(f"note: {note}") for note in response.notes)
    lines.append(f"artifact {response.artifact_id}")
    return "\n".join(lines)
