"""`slackquery thread ID`: read a thread of the published archive in time order."""

import argparse
import textwrap

from serving.engine import MAX_THREAD_LIMIT
from serving.models import ThreadResponse
from slackquery.commands import (
    add_json_flag,
    add_page_flags,
    add_requester_flags,
    emit,
    requester_from,
)
from slackquery.commands.search import (
    byline,
    conversation_label,
    files_line,
    more_line,
    paged_read,
)
from slackquery.escaping import terminal_line, terminal_text
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `thread` subcommand."""
    parser = subparsers.add_parser(
        "thread",
        help="read a whole thread (root and replies) in time order",
        description="Print a thread of the published artifact, root first, as the MCP tool "
        "get_slack_thread does. Name it by a search hit's thread_id (W:C:thread_ts), or by "
        "the document id or permalink of any of its messages (search prints permalinks). "
        "--json prints the same structure as the tool.",
    )
    parser.add_argument("thread", help="thread id, message id or permalink")
    add_page_flags(parser, "messages", MAX_THREAD_LIMIT, "thread")
    add_requester_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Read and print."""
    requester = requester_from(args, settings)
    response, cursor_lasts = paged_read(
        settings,
        lambda engine: engine.get_thread(
            args.thread, args.limit, requester=requester, cursor=args.cursor
        ),
    )
    emit(args, response.model_dump(mode="json"), render(response, cursor_lasts))
    return 0


def render(response: ThreadResponse, cursor_lasts: bool = True) -> str:
    """Each message's byline, its whole text indented (newlines kept, every value escaped
    for the terminal), its files and its permalink; then the notes and the next page's
    cursor."""
    first = response.messages[0]
    place = conversation_label(first.channel_name, first.conversation_type, first.channel_id)
    shown = f"messages {response.offset + 1}-{response.offset + len(response.messages)}"
    lines = [
        terminal_line(
            f"thread {response.thread_id} in {place} · {shown} · artifact {response.artifact_id}"
        )
    ]
    for message in response.messages:
        lines.append(byline(place, message.author_name, message.timestamp))
        lines.append(textwrap.indent(terminal_text(message.text), "    ", lambda _: True))
        lines.extend(files_line(message.files))
        if message.permalink:
            lines.append(terminal_line(f"    {message.permalink}"))
    lines.extend(terminal_line(f"note: {note}") for note in response.notes)
    lines.extend(more_line(response.next_cursor, cursor_lasts, "messages"))
    return "\n".join(lines)
