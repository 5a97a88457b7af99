"""`slackquery search "query"`: search the published artifact from the terminal."""

import argparse
import re
from collections.abc import Callable
from contextlib import closing
from typing import TypeVar

from serving.access import Requester
from serving.engine import SearchEngine, period_words
from serving.models import AttachedFile, MessageRecord, SearchRequest, SearchResponse
from serving.query import NEWEST, content_tokens, parse_query
from slackquery.commands import (
    CURSOR_KEY_NAME,
    add_json_flag,
    add_requester_flags,
    add_text_argument,
    emit,
    iso_day,
    requester_from,
    whole_number,
    with_kept_cursor_key,
)
from slackquery.escaping import emphasis, terminal_line
from slackquery.settings import Settings

SNIPPET_CHARS = 240
Paged = TypeVar("Paged")
# The most results a call may return is a setting; help states its default, not the
# environment's value, which the parser does not read.
MAX_RESULTS_DEFAULT = Settings.model_fields["search_max_results"].default


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `search` subcommand."""
    parser = subparsers.add_parser(
        "search",
        help="search the published archive (hybrid, lexical or semantic)",
        description="Search the published search artifact, exactly as the MCP tool "
        "search_slack does. The query may use Slack search syntax: in:#channel from:@user "
        'before:/after:/on:YYYY-MM-DD during:YYYY-MM is:thread has:link "exact phrase" -word '
        "(dates are UTC days: before: and after: exclude the day they name, on: and during: "
        "include theirs); operators alone (in:#incidents on:yesterday) list the messages they "
        "keep, newest first. --json prints the same structure as the tool.",
    )
    add_text_argument(parser, "query", "what to search for, in one or more words")
    parser.add_argument(
        "--mode",
        choices=("hybrid", "lexical", "semantic"),
        default="hybrid",
        help="hybrid (default), lexical (exact words, ids, error codes) or semantic (paraphrases)",
    )
    add_filter_flags(parser)
    parser.add_argument(
        "--limit",
        type=whole_number(1),
        default=10,
        help="results per page (default 10; at most SLACKQUERY_SEARCH_MAX_RESULTS, "
        f"default {MAX_RESULTS_DEFAULT})",
    )
    parser.add_argument("--cursor", help="next_cursor of a previous page (same query and flags)")
    add_requester_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=run, usage_error=parser.error)


def check_max_results(
    args: argparse.Namespace, option: str, value: int, settings: Settings
) -> None:
    """Refuse a result count over SLACKQUERY_SEARCH_MAX_RESULTS as a usage error, as its
    argparse type refuses one under 1: the parser is built before settings are read."""
    most = settings.search_max_results
    if value > most:
        args.usage_error(
            f"argument {option}: {str(value)!r} is not a whole number from 1 to {most} "
            "(SLACKQUERY_SEARCH_MAX_RESULTS)"
        )


def add_filter_flags(parser: argparse.ArgumentParser) -> None:
    """The channel, author, workspace and date flags (`search` and `ask`)."""
    parser.add_argument(
        "--in",
        dest="channels",
        action="append",
        type=named,
        metavar="CHANNEL",
        help="only this channel (#name or id); repeatable",
    )
    parser.add_argument(
        "--from",
        dest="authors",
        action="append",
        type=named,
        metavar="USER",
        help="only this author (@name or id); repeatable",
    )
    parser.add_argument(
        "--workspace",
        dest="workspaces",
        action="append",
        type=named,
        metavar="WORKSPACE",
        help="only this workspace (slug or id); repeatable",
    )
    parser.add_argument(
        "--after",
        type=search_day,
        metavar="YYYY-MM-DD",
        help="only messages after this UTC day; like after:, it excludes the day it names "
        "(`today` and `yesterday` work too)",
    )
    parser.add_argument(
        "--before",
        type=search_day,
        metavar="YYYY-MM-DD",
        help="only messages before this UTC day; like before:, it excludes the day it names "
        "(`today` and `yesterday` work too)",
    )


def named(value: str) -> str:
    """An argparse type: a name or id, so that `--in ""` is a usage error of the flag, not
    the search's refusal in the MCP field's name (`channel_ids`)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must name one (it was empty)")
    return value


def search_day(value: str) -> str:
    """An argparse type: a day for the `after:`/`before:` operators, YYYY-MM-DD or
    `today`/`yesterday` (which the search resolves when it runs)."""
    if value.lower() in ("today", "yesterday"):
        return value.lower()
    try:
        return iso_day(value).isoformat()
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a day; use YYYY-MM-DD, today or yesterday"
        ) from None


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Search and print the results."""
    check_max_results(args, "--limit", args.limit, settings)
    query = filtered_query(args.query, args)
    requester = requester_from(args, settings)
    request = SearchRequest(
        query=query,
        mode=args.mode,
        channel_ids=args.channels,
        author_ids=args.authors,
        workspace_ids=args.workspaces,
        limit=args.limit,
        cursor=args.cursor,
    )

    def read(engine: SearchEngine) -> tuple[SearchResponse, dict[str, MessageRecord]]:
        response = engine.search(request, requester=requester)
        return response, {} if args.json else thread_starts(engine, response, requester)

    (response, starts), cursor_lasts = paged_read(settings, read)
    emit(args, response.model_dump(mode="json"), render(response, starts, cursor_lasts))
    return 0


def paged_read(settings: Settings, read: Callable[[SearchEngine], Paged]) -> tuple[Paged, bool]:
    """`read` on an engine whose cursors the next command accepts, and whether it will
    (False: the home could keep no cursor key, so no printed cursor would work)."""
    settings = with_kept_cursor_key(settings)
    with closing(SearchEngine(settings)) as engine:
        response = read(engine)
    return response, settings.cursor_secret is not None


def more_line(next_cursor: str | None, cursor_lasts: bool, what: str) -> list[str]:
    """The line that ends a page of `what` when more follow: the cursor to pass, or why no
    cursor would work."""
    if next_cursor is None:
        return []
    if cursor_lasts:
        return [f"more: --cursor {next_cursor}"]
    return [
        f"more {what} exist, but no cursor for them would work: {CURSOR_KEY_NAME} cannot "
        "be kept in SLACKQUERY_HOME (read-only?); set SLACKQUERY_CURSOR_SECRET, or raise "
        "--limit"
    ]


def thread_starts(
    engine: SearchEngine, response: SearchResponse, requester: Requester | None
) -> dict[str, MessageRecord]:
    """The first message of each hit's thread, by the hit's id, for hits that are replies:
    a reply ("45 seconds, check the config.") often reads as an answer only beside the
    question it answers, as Slack's own results show it."""
    starts = {}
    for hit in response.results:
        start = None if hit.replies_to is None else engine.message_record(hit.replies_to, requester)
        if start is not None:
            starts[hit.document_id] = start
    return starts


def filtered_query(query: str, args: argparse.Namespace) -> str:
    """The query with `--after`/`--before` added as Slack date operators."""
    if args.after:
        query += f" after:{args.after}"
    if args.before:
        query += f" before:{args.before}"
    return query


def snippet(text: str, query: str) -> str:
    """A window of the text around the first query term, matches highlighted.

    The terms are those BM25 searched for (no operators, stop words dropped). Bold on a
    terminal; `**term**` when the output is piped, so logs stay free of escapes. The text
    is escaped before the bold is added: the highlight is the only escape sequence printed.
    """
    parsed = parse_query(query)
    terms = sorted(set(content_tokens(parsed.text, parsed.phrases)), key=len, reverse=True)
    flat = terminal_line(" ".join(text.split()))
    if not terms:
        return flat[:SNIPPET_CHARS] + ("…" if len(flat) > SNIPPET_CHARS else "")
    pattern = re.compile(
        r"(?<![\w])(" + "|".join(re.escape(term) for term in terms) + r")(?![\w])", re.IGNORECASE
    )
    match = pattern.search(flat)
    start = max(0, match.start() - SNIPPET_CHARS // 3) if match else 0
    window = flat[start : start + SNIPPET_CHARS]
    window = ("…" if start else "") + window + ("…" if start + SNIPPET_CHARS < len(flat) else "")
    opening, closing = emphasis()
    return pattern.sub(lambda m: f"{opening}{m.group(0)}{closing}", window)


def conversation_label(name: str | None, kind: str | None, channel_id: str) -> str:
    """How the terminal names a conversation: `#name` for a channel, as Slack does; a DM
    or group DM by its name (its members) and kind, `jose, zoe (dm)`; else its id."""
    if kind in ("public", "private") and name:
        return f"#{name}"
    return f"{name or channel_id} ({kind})" if kind else name or channel_id


def period_line(filters: dict[str, object]) -> list[str]:
    """The days a time filter keeps, as the query's words were read (`during:march` is
    the latest March past, which an archive of older years may not hold)."""
    start, end = filters.get("start_ts_us"), filters.get("end_ts_us")
    if not isinstance(start, int) and not isinstance(end, int):
        return []
    first = start if isinstance(start, int) else None
    last = end if isinstance(end, int) else None
    return [f"  posted {period_words(first, last)} (UTC days)"]


def byline(channel: str, author_name: str | None, timestamp: str) -> str:
    """`#channel · author · YYYY-MM-DD HH:MM UTC` (`channel`: a `conversation_label`), the
    names escaped for the terminal."""
    return terminal_line(f"{channel} · {author_name} · {timestamp[:16].replace('T', ' ')} UTC")


def files_line(files: list[AttachedFile]) -> list[str]:
    """The indented line naming a message's attached files (none when it has none): each
    file's name, and its title where Slack shows another, escaped for the terminal."""
    if not files:
        return []
    named = [
        " — ".join(dict.fromkeys(part for part in (file.name, file.title) if part)) or file.file_id
        for file in files
    ]
    return [terminal_line(f"    files: {', '.join(named)}")]


def in_reply_to_line(author_name: str | None, text: str, query: str = "") -> str:
    """The indented line that shows, under a reply, the message that started its thread,
    with the query's terms highlighted: a reply's BM25 score counts its root's words too."""
    return f"    in reply to {terminal_line(str(author_name))}: {snippet(text, query)}"


def render(
    response: SearchResponse,
    starts: dict[str, MessageRecord] | None = None,
    cursor_lasts: bool = True,
) -> str:
    """Readable results: channel, author, time, highlighted snippet, attached files, what a
    reply answers (`starts`: thread starts by hit id), permalink, then the next page's cursor
    (unless `cursor_lasts` is False: no other process could use it). Every value from the
    archive is escaped for the terminal (`byline`, `snippet`, `files_line`,
    `in_reply_to_line` or here)."""
    coverage = (
        f", vector coverage {response.vector_coverage:.1%}"
        if response.vector_coverage is not None
        else ""
    )
    listing = response.route == NEWEST  # operators only: nothing was scored
    searched = "the filters, newest first" if listing else repr(response.query)
    lines = [
        f"{len(response.results)} result(s) for {searched} (mode {response.mode}, "
        f"route {response.route}, artifact {response.artifact_id}{coverage})"
    ]
    lines.extend(period_line(response.filters))
    for number, hit in enumerate(response.results, start=response.offset + 1):
        score = "" if listing else f" · score {hit.fused_score:.4f}"
        place = conversation_label(hit.channel_name, hit.conversation_type, hit.channel_id)
        lines.append(f"{number:>2}. {byline(place, hit.author_name, hit.timestamp)}{score}")
        lines.append(f"    {snippet(hit.text, response.query)}")
        lines.extend(files_line(hit.files))
        start = (starts or {}).get(hit.document_id)
        if start is not None:
            lines.append(in_reply_to_line(start.author_name, start.text, response.query))
        lines.append(terminal_line(f"    {hit.permalink}"))
    lines.extend(terminal_line(f"note: {note}") for note in response.notes)
    lines.extend(more_line(response.next_cursor, cursor_lasts, "results"))
    return "\n".join(lines)
