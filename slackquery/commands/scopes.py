"""`slackquery scopes`: the workspaces and channels of the published archive."""

import argparse

from serving.engine import MAX_SCOPE_LIMIT
from serving.models import ScopesResponse
from slackquery.commands import (
    add_json_flag,
    add_page_flags,
    add_requester_flags,
    emit,
    requester_from,
)
from slackquery.commands.search import conversation_label, more_line, paged_read
from slackquery.escaping import terminal_line
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `scopes` subcommand."""
    parser = subparsers.add_parser(
        "scopes",
        help="list the workspaces and channels you can search, with counts and dates",
        description="List the channels (and DMs) of the published artifact with their "
        "workspace, message count and first and last message, as the MCP tool "
        "list_slack_scopes does; with --as, only those that user may see.",
    )
    parser.add_argument("--workspace", help="only this workspace (id, slug or name)")
    parser.add_argument("--channel", help="only channels of this name (#eng or eng)")
    add_page_flags(parser, "channels", MAX_SCOPE_LIMIT, "flags")
    add_requester_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """List and print."""
    requester = requester_from(args, settings)
    response, cursor_lasts = paged_read(
        settings,
        lambda engine: engine.list_scopes(
            args.workspace, args.channel, args.limit, requester=requester, cursor=args.cursor
        ),
    )
    emit(args, response.model_dump(mode="json"), render(response, cursor_lasts))
    return 0


def render(response: ScopesResponse, cursor_lasts: bool = True) -> str:
    """One line per channel: workspace, #name (or id and kind), messages, date span;
    escaped for the terminal, since the names come from the export; then the next page's
    cursor."""
    lines = []
    for scope in response.scopes:
        name = conversation_label(scope.channel_name, scope.conversation_type, scope.channel_id)
        if name.startswith("#"):  # which kind of channel: a DM's label names its kind
            name += f" ({scope.conversation_type})"
        span = (
            f"{scope.first_timestamp[:10]} to {scope.last_timestamp[:10]}"
            if scope.first_timestamp is not None and scope.last_timestamp is not None
            else "no messages"
        )
        lines.append(
            f"{scope.workspace_slug or scope.workspace_id}  {name} "
            f"· {scope.message_count} messages · {span}"
        )
    count, offset = len(response.scopes), response.offset
    paged = offset or response.truncated  # a page, not the whole listing
    shown = f"channels {offset + 1}-{offset + count}" if paged else f"{count} channel(s)"
    lines.append(f"{shown} in artifact {response.artifact_id}")
    lines.extend(more_line(response.next_cursor, cursor_lasts, "channels"))
    return "\n".join(map(terminal_line, lines))
