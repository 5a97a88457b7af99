"""`slackquery sync`: bring the canonical store up to date from the Slack Web API."""

import argparse
from typing import Any

from slackquery.commands import (
    add_json_flag,
    emit,
    iso_day,
    positive_float,
    shows_progress,
    whole_number,
)
from slackquery.commands.importer import render_counts
from slackquery.escaping import terminal_line
from slackquery.settings import Settings
from slackquery.slack.plan import plan
from slackquery.slack.sync import CONVERSATION_TYPES, Progress, SyncRequest, sync


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sync` subcommand."""
    parser = subparsers.add_parser(
        "sync",
        help="sync the canonical store from the Slack Web API (paced, resumable)",
        description="Read users, conversations, members, history and thread replies from the "
        "Slack Web API (SLACKQUERY_SLACK_API_URL, token SLACKQUERY_SLACK_TOKEN) into the "
        "canonical store, at the pace SLACKQUERY_SLACK_REQUESTS_PER_MINUTE sets. Every page is "
        "committed with its checkpoint, so a killed run resumes where it stopped; each run "
        "re-reads the last SLACKQUERY_SLACK_REREAD_DAYS days to catch edits and deletions, and "
        "a few quiet threads (SLACKQUERY_SLACK_THREAD_SWEEP_PER_RUN) for late replies and a "
        "page of a few conversations' older history (SLACKQUERY_SLACK_HISTORY_SWEEP_PER_RUN) "
        "for old edits and deletions. "
        "Takes the same lock as `import`.",
    )
    parser.add_argument(
        "--channels",
        help="comma-separated conversations to sync, by id (C…) or name (#general); default all",
    )
    parser.add_argument(
        "--types",
        type=conversation_types,
        default=tuple(CONVERSATION_TYPES),
        help="comma-separated conversation types: public, private, mpim, im (default: all)",
    )
    parser.add_argument(
        "--since",
        type=iso_day,
        help="read no history before YYYY-MM-DD, on this and every run that passes it (after "
        "an import, its export's last day: older history is then left as imported)",
    )
    parser.add_argument(
        "--max-minutes",
        type=positive_float,
        help="stop after this many minutes, between two pages (the conversation in progress "
        "goes on from its checkpoint at its next turn); the next run begins with those left, "
        "least recently synced first. For scheduled runs shorter than one pass over every "
        "conversation (default: no limit)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print what each pacing preset means for a full sync and for each later run "
        "(requests, minutes) and exit",
    )
    parser.add_argument(
        "--messages",
        type=whole_number(0),
        help="with --plan: the workspace size to plan for (default 100,000 messages)",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run, usage_error=parser.error)


def conversation_types(value: str) -> tuple[str, ...]:
    """`public,private` -> ('public', 'private'); a type sync does not know is a usage error."""
    kinds = tuple(kind.strip() for kind in value.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in CONVERSATION_TYPES]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected comma-separated types from {', '.join(CONVERSATION_TYPES)}"
        )
    return kinds


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Sync (or plan) and print the summary."""
    if args.messages is not None and not args.plan:
        args.usage_error("--messages applies to --plan")
    if args.plan:
        result = plan(settings, 100_000 if args.messages is None else args.messages)
        emit(args, result, render_plan(result))
        return 0
    request = SyncRequest(
        types=args.types,
        channels=tuple(name.strip() for name in (args.channels or "").split(",") if name.strip()),
        since=args.since,
        max_minutes=args.max_minutes,
    )
    with _ProgressBar(enabled=shows_progress(args)) as progress:
        result = sync(settings, request, progress=progress)
    emit(args, result, render(result))
    return 0


class _ProgressBar:
    """A rich bar on stderr: conversations done of total, and the ETA the pacing implies."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def __enter__(self) -> Progress:
        if not self.enabled:
            return Progress()
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as Bar

        self.bar = Bar(
            TextColumn("sync"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "conversations, {task.fields[pages]} pages, ETA ≥ {task.fields[eta]} at this pace"
            ),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("sync", total=None, eta="?", pages=0)

        def update(done: int, total: int, eta_s: float, pages: int) -> None:
            self.bar.update(
                task, completed=done, total=total, eta=f"{eta_s / 60:.1f} min", pages=pages
            )

        return Progress(update)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def render(result: dict[str, Any]) -> str:
    """The human-readable summary."""
    lines = [
        f"sync run {result['run_id']}: {result['conversations']} conversation(s) of "
        f"{result['workspace_id']} in {result['duration_s']} s, "
        f"{result['request_count']:,} requests ({result['pacing']} pacing), "
        f"{result['rate_limit_wait_s']} s waiting on rate limits",
    ]
    lines.extend(render_counts(result["counts"]))
    lines.append(
        "  requests: " + ", ".join(f"{method} {n:,}" for method, n in result["requests"].items())
    )
    if result["swept_threads"]:
        lines.append(f"  quiet threads queued to re-read: {result['swept_threads']:,}")
    if result["swept_history"]:
        lines.append(f"  pages of older history re-read: {result['swept_history']:,}")
    if result["retries"]:
        lines.append(
            "  retries: " + ", ".join(f"{method} {n:,}" for method, n in result["retries"].items())
        )
    for skipped in result["skipped"]:
        lines.append(f"  skipped {skipped['channel_id']}: {skipped['error']}")
    if result["deferred"]:
        lines.append(
            f"  deferred to the next run (--max-minutes): {len(result['deferred']):,} "
            "conversation(s)"
        )
    for revoked in result["revoked"]:
        lines.append(
            f"  members emptied {revoked['channel_id']}: {revoked['reason']} (see warnings)"
        )
    if result["warning_count"]:
        lines.append(f"warnings: {result['warning_count']:,}")
        lines.extend(f"  {item['file']}: {item['problem']}" for item in result["warnings"][:20])
    # Names and warnings quote the input: escaped for the terminal.
    return "\n".join(map(terminal_line, lines))


def render_plan(result: dict[str, Any]) -> str:
    """One block per pacing preset: requests per method and minutes."""
    shape = result["shape"]
    lines = [
        f"full sync of {result['messages']:,} messages, shaped like the store "
        f"({shape['from_store_messages']:,} messages, {shape['conversations']} conversations, "
        f"~{shape['threads']:,} threads at this size):"
    ]
    for preset in result["presets"]:
        lines.append(
            f"  {preset['preset']:<16} {preset['request_count']:>9,} requests, "
            f"{preset['minutes_at_least']:>9,} to {preset['minutes_at_most']:,} min "
            f"(history pages of {preset['history_page_size']})"
        )
        lines.append(
            "      " + ", ".join(f"{method} {n:,}" for method, n in preset["requests"].items())
        )
        later = preset["later_run"]
        lines.append(
            f"      each later run: at least {later['request_count']:,} requests and "
            f"{later['minutes_at_least']:,} min (private channels' members and a share of "
            "public ones', a history page of every conversation, the sweeps of older "
            "history and quiet threads; new messages add to it)"
        )
    return "\n".join(lines)
