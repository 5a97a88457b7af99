"""`sync`: bring the canonical store up to date from the Slack Web API, resumably.

One run: identity (`auth.test`, `team.info`) → users (`users.list`) → conversations
(`conversations.list`, then `conversations.members` of each) merged at once, so renames,
archival and membership changes land first → one pass per conversation over
`conversations.history`, queueing the threads to read with `conversations.replies`.

A pass reads (oldest, latest): the first pass from `--since` (or the beginning), later
ones from the older of "where the last pass ended" and "now minus slack_reread_days"
(never before `--since`), so each run re-reads the window in which edits and deletions
still happen. Threads are read when a history page's parent holds another `latest_reply`
or `reply_count` than the stored parent (a broadcast reply already read from history does
not count as having the thread), or when its last reply falls in the window; the threads
whose last stored reply is in the window are queued from the store too, so a new reply to
a thread whose parent lies before the window is found while that thread is active.
A new reply to a thread whose parent and last stored reply both lie before the window is
on no page a run reads (unless it is broadcast to the channel), so each run also sweeps a
few of those quiet threads (`slack_thread_sweep_per_run`, at most one minute of
`conversations.replies` at the run's pacing): those whose last stored reply is within
`slack_thread_sweep_days` and that were not read whole in the last day, least recently
read first. Such a reply is found within a day when the sweep keeps up (quiet threads up to
a day's runs x sweep size), else in turn; a run with a larger slack_reread_days finds it at
once. The day spares requests (a small workspace's quiet threads are not re-read every
run) and a resumed run does not read again the threads its killed run read.
A thread Slack no longer has (`thread_not_found`) is tombstoned whole.

A top-level message edited or deleted after the re-read window has passed it is on no page
a pass reads either, so each run also sweeps older history: of a few conversations
(`slack_history_sweep_per_run`, at most one minute of `conversations.history` at the run's
pacing: 50 at `tiers`, 1 at `non-marketplace`), least recently swept first, it re-reads one
page ending where that conversation's last sweep page began (the pass's lower bound at
first), merges it, tombstones the stored messages between the page's oldest message and
its end that it did not return, and reads the threads on it that changed. Once Slack holds
nothing older the next sweep starts again from the window. Nothing older than the oldest
message Slack returns is tombstoned, so history Slack hides (a free workspace's) stays as
stored. A conversation of N older messages is swept through in N / page size sweeps.

Conversations are read in turn: those never read first, then the one whose turn came
longest ago; a conversation's turn comes when a run starts reading it, whether or not that
run finishes it. With `max_minutes` a run stops once that long has passed: it starts no
conversation, and leaves the one it is in between two pages (each run reads at least one
page); it reports both as `deferred`. A pass cut short stays open and goes on from its
checkpoint at its next turn. So a schedule shorter than one pass over every conversation
(a minute each at the `non-marketplace` pace) still reads them all in turn, and a
conversation that stops every run (a page that cannot be trusted, server errors that
outlast the retries) is read after the others, so it cannot keep them from being read.

An error Slack answers one conversation's call with (`not_in_channel`, `channel_not_found`,
`ekm_access_denied`, or any other that is not about the token or the request) skips that
conversation with a warning naming it, and the run goes on with the others.

Member lists: a private channel's is read on every run (membership decides who may see
it); a DM's or group DM's never changes in Slack (adding someone makes another group DM), so
it is read once, when the store holds none; a public channel's decides nothing (everyone in
the workspace may see it), so each run reads as many as one minute of
`conversations.members` allows (100 at Slack's pace, all when unpaced), least recently read
first. A conversation whose stored list is empty (closed, below) is read again.

Access fails closed: a private channel, group DM or DM that a sync of this workspace read
before, of a type the run asks for, that this run cannot read (no longer listed, or an
error of its own, such as `not_in_channel`, at any step) has its stored member list emptied, so
that only the operator sees it until a sync that can read it stores its members again; a
public channel no longer listed (deleted, or made private without this token) is stored
as private with no members the same way. A conversation known only from an `import` keeps
the members of its export.

A workspace the store already holds under another id, imported from an input without a
team id (its users are this workspace's), is refused before anything is written: a sync
would store a second copy of it under its team id.

The run holds the canonical store's writer lock from start to end, pacing waits included:
meanwhile `import` refuses to start and `project` cannot open the store.
Every page is one transaction with its checkpoint (`canonical.sync_store`); a page that
cannot be trusted to be whole stops the run before anything is tombstoned.
"""

import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import orjson

from slackquery.artifacts.files import holder_name
from slackquery.canonical import store
from slackquery.canonical.authors import Authors
from slackquery.canonical.importer import SLUG, slug_keyed_copy, upsert_workspace
from slackquery.canonical.rows import ChannelRow, slack_channel_row, slack_user_row, ts_to_us
from slackquery.canonical.staging import Staged, Warnings
from slackquery.canonical.sync_store import (
    HISTORY,
    StoredConversation,
    StoredMembers,
    SyncStore,
)
from slackquery.errors import SlackqueryError
from slackquery.escaping import quoted
from slackquery.settings import Settings
from slackquery.slack.client import (
    ConversationError,
    CursorTrail,
    SlackApiError,
    SlackClient,
    page_items,
)
from slackquery.slack.pacing import Clock, Pacing, SystemClock

CONVERSATION_TYPES = {
    "public": "public_channel",
    "private": "private_channel",
    "mpim": "mpim",
    "im": "im",
}
PRIVATE_TYPES = ("private_channel", "mpim", "im")
UNLISTED = "no longer listed"
DAY_S = 86_400
NEVER = datetime.min.replace(tzinfo=UTC)  # sorts before any time a sync read something


@dataclass(frozen=True)
class SyncRequest:
    """What to sync: conversation types, an optional channel list, an optional start day,
    and optionally how long a run may go on reading."""

    types: tuple[str, ...] = tuple(CONVERSATION_TYPES)
    channels: tuple[str, ...] = ()  # ids (C…) or names (#name / name)
    since: date | None = None
    max_minutes: float | None = None  # stop after this, between two pages; the next run goes on


@dataclass
class Progress:
    """Reports conversations done of those listed, the least time left at this pace, and
    the pages this run wrote: `update(done, total, eta_s, pages)`, called before each
    conversation and after each page (a big channel is thousands of pages)."""

    update: Callable[[int, int, float, int], None] = lambda done, total, eta_s, pages: None


@dataclass
class _Conversation:
    entry: dict[str, Any]
    row: ChannelRow


@dataclass
class _Run:
    """The state one sync run carries from step to step."""

    settings: Settings
    client: SlackClient
    db: SyncStore
    clock: Clock
    request: SyncRequest
    progress: Progress
    run_id: str
    warnings: Warnings
    deadline_s: float | None = None  # on the monotonic clock: max_minutes after the start
    position: tuple[int, int] = (0, 0)  # conversations done, of those listed
    workspace_id: str = ""
    authors: Authors | None = None
    synced_before: dict[str, StoredConversation] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    revoked: list[dict[str, str]] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    swept_threads: int = 0
    history_sweep: dict[str, str | None] = field(default_factory=dict)
    swept_history: int = 0
    synced: int = 0  # conversations whose pass this run finished


def sync(
    settings: Settings,
    request: SyncRequest | None = None,
    *,
    clock: Clock | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run one sync and return its summary (see `summary`)."""
    request = request or SyncRequest()
    unknown = sorted(set(request.types) - set(CONVERSATION_TYPES))
    if unknown:
        raise SlackqueryError(f"unknown conversation type(s) {', '.join(unknown)}")
    clock = clock or SystemClock()
    started_clock = clock.monotonic()
    started_at = datetime.fromtimestamp(clock.time(), UTC)
    run_id = f"{started_at:%Y%m%dT%H%M%S%f}Z-sync-{uuid.uuid4().hex[:8]}"
    warnings = Warnings()
    with ExitStack() as stack:
        stack.enter_context(store.writer_lock(settings, holder_name("a sync")))
        client = stack.enter_context(SlackClient(settings, clock=clock))
        db = SyncStore(settings, run_id, warnings)
        stack.callback(db.close)
        run = _Run(settings, client, db, clock, request, progress or Progress(), run_id, warnings)
        if request.max_minutes is not None:
            run.deadline_s = started_clock + request.max_minutes * 60
        conversations = _in_turn(run, _sync_directory(run))
        _queue_thread_sweep(run, conversations)
        run.history_sweep = run.db.history_sweep_turns(
            run.workspace_id,
            [conversation.row.channel_id for conversation in conversations],
            history_sweep_size(settings, client.pacing),
        )
        for done, conversation in enumerate(conversations):
            run.position = (done, len(conversations))
            try:
                if done and _out_of_time(run):  # between two conversations
                    raise _OutOfTime
                _report(run)
                _sync_conversation(run, conversation)  # or between two of its pages
            except _OutOfTime:
                run.deferred = [later.row.channel_id for later in conversations[done:]]
                break
        run.progress.update(len(conversations), len(conversations), 0.0, db.pages_written)
        result = summary(run, clock.monotonic() - started_clock)
        db.record_run(
            workspace_id=run.workspace_id,
            source=settings.slack_api_url,
            started_at=started_at,
            summary=result,
        )
    result["store"] = store.summarize(settings.canonical_path)
    return result


def _now(run: _Run) -> datetime:
    return datetime.fromtimestamp(run.clock.time(), UTC)


def _sync_directory(run: _Run) -> list[_Conversation]:
    """Identity, users and the wanted conversations with their members, merged at once."""
    identity, team = _identity(run)
    users = _users(run)
    _refuse_a_second_copy(run, identity, team, users)
    run.authors = Authors(users, run.warnings)
    run.synced_before = run.db.synced_conversations(run.workspace_id)
    conversations, unlisted = _wanted(run, _list_conversations(run))
    stored = run.db.stored_members(run.workspace_id)
    to_read = _member_lists_to_read(run, conversations, stored)
    handle = _handle(users)
    kept = []
    for entry in conversations:
        try:
            entry["members"] = (
                _members(run, entry["id"])
                if entry["id"] in to_read
                else stored[entry["id"]].member_ids
            )
        except ConversationError as error:
            _skip(run, entry, error)
            continue
        kind = conversation_type(entry)
        folder = entry["id"] if kind == "im" or not entry.get("name") else str(entry["name"])
        row = slack_channel_row(
            run.workspace_id, entry, conversation_type=kind, folder=folder, handle=handle
        )
        kept.append(_Conversation(entry, row))
    now = _now(run)
    user_rows = [slack_user_row(run.workspace_id, entry) for entry in users.values()]
    run.db.write_directory(user_rows, [item.row for item in kept], now, members_read=to_read)
    for channel_id in unlisted:
        stored = run.synced_before[channel_id]
        _unreadable(run, channel_id, stored.conversation_type, stored.name, UNLISTED)
    _upsert_identity(run, identity, team, now)
    return kept


def _member_lists_to_read(
    run: _Run, conversations: list[dict[str, Any]], stored: dict[str, StoredMembers]
) -> set[str]:
    """The conversations whose member lists this run reads (see the module docstring):
    every private channel's, every one the store holds none of, and of the public
    channels' as many as one minute of `conversations.members` allows, least recently
    read first."""
    to_read, public = set(), []
    for entry in conversations:
        members = stored.get(entry["id"])
        kind = conversation_type(entry)
        if members is None or not members.member_ids or kind == "private_channel":
            to_read.add(entry["id"])
        elif kind == "public_channel":
            public.append((members.read_at or NEVER, entry["id"]))
    share = public_member_lists_per_run(len(public), run.client.pacing)
    return to_read | {channel_id for _, channel_id in sorted(public)[:share]}


def public_member_lists_per_run(public: int, pacing: Pacing) -> int:
    """How many of `public` public channels' member lists a run reads: as many as one
    minute of `conversations.members` allows at this pace."""
    return pacing.calls_in_a_minute("conversations.members", public)


def _in_turn(run: _Run, conversations: list[_Conversation]) -> list[_Conversation]:
    """The order to read them in: those no sync has read, then the one whose turn came
    longest ago (`SyncStore.take_turn`), so that runs cut short by `max_minutes`, or stopped by one
    conversation, take every conversation in turn.

    A pass left open does not go first: a conversation that stops every run (a page that
    cannot be trusted, server errors outlasting the retries) would then stop every run
    before any other conversation is read. It goes on from its checkpoint at its turn.
    """

    def turn(conversation: _Conversation) -> datetime:
        stored = run.synced_before.get(conversation.row.channel_id)
        return NEVER if stored is None else stored.synced_at

    return sorted(conversations, key=turn)


class _OutOfTime(Exception):
    """`max_minutes` passed while a conversation was being read: it is left between two
    pages, its checkpoint committed, and goes on at its next turn."""


def _out_of_time(run: _Run) -> bool:
    return run.deadline_s is not None and run.clock.monotonic() >= run.deadline_s


def _mind_the_time(run: _Run) -> None:
    """Stop the conversation in progress once `max_minutes` has passed, but only after this
    run has written a page: a run whose directory alone takes that long still moves on."""
    if run.db.pages_written and _out_of_time(run):
        raise _OutOfTime


def _identity(run: _Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """`auth.test` (which names the workspace) and `team.info`'s team (a name and domain)."""
    identity = run.client.call("auth.test")
    team_id = identity.get("team_id")
    if not isinstance(team_id, str) or not team_id:
        raise SlackApiError("auth.test", "malformed response", "it names no team_id")
    run.workspace_id = team_id
    team = run.client.call("team.info", team=team_id).get("team")
    if not isinstance(team, dict):
        run.warnings.add(
            "slack:team.info", "team.info gave no team object; the workspace is named by auth.test"
        )
        return identity, {}
    return identity, team


def _users(run: _Run) -> dict[str, dict[str, Any]]:
    return {
        member["id"]: member
        for member in run.client.items("users.list", "members", limit=run.settings.slack_page_size)
        if isinstance(member, dict)
        and isinstance(member.get("id"), str)
        and _storable(run, "users.list", member)
    }


def _team_domain(identity: dict[str, Any], team: dict[str, Any]) -> object:
    """The workspace's domain as Slack reports it (`team.info`, else auth.test's URL)."""
    return team.get("domain") or str(identity.get("url", "")).split("//")[-1].split(".")[0]


def _refuse_a_second_copy(
    run: _Run, identity: dict[str, Any], team: dict[str, Any], users: dict[str, Any]
) -> None:
    """Refuse, before anything is written, to sync a workspace that the store holds under
    another id: one imported from an input without a team id is keyed by a slug, and its
    users are this workspace's (`importer.slug_keyed_copy`). The advice names the slug this
    sync gives the workspace, which `import --workspace-slug` resolves to it."""
    copy = slug_keyed_copy(run.db.connection, run.workspace_id, list(users))
    if copy is None:
        return
    domain = _team_domain(identity, team)
    slug = domain if isinstance(domain, str) and SLUG.fullmatch(domain) else ""
    slug = slug or run.workspace_id.lower()
    raise SlackqueryError(
        f"the store already holds Slack workspace {run.workspace_id} as workspace "
        f"{copy.workspace_id!r} (slug {copy.workspace_slug!r}), imported from an input without "
        f"a team id: {copy.shared} of its users (e.g. {copy.example}) are this workspace's, "
        "so a sync would store a second copy of it; nothing was written. Sync into a new "
        f"store (move {run.settings.canonical_path} aside), then import that input again "
        f"with --workspace-slug {slug} to add its history to the synced workspace"
    )


def _upsert_identity(
    run: _Run, identity: dict[str, Any], team: dict[str, Any], now: datetime
) -> None:
    """The workspace row, named and addressed as Slack reports it; a domain that is no
    Slack domain (it would become every permalink's host) is not taken."""
    domain = _team_domain(identity, team)
    if not isinstance(domain, str) or not SLUG.fullmatch(domain):
        run.warnings.add(
            "slack:team.info",
            f"team domain {quoted(domain)} is no Slack domain (lowercase letters, digits, "
            "dashes): the workspace keeps its stored address",
        )
        domain = ""
    name = team.get("name") or identity.get("team") or domain
    if not isinstance(name, str):
        name = run.workspace_id
    staged = Staged(run.workspace_id, str(name), "slack_api", [], None, None)
    connection = run.db.connection
    connection.begin()
    upsert_workspace(
        connection,
        staged,
        run_id=run.run_id,
        now=now,
        slug=str(domain) or None,
        slug_hint=str(domain) or run.workspace_id.lower(),
        name=str(name),
        data_changed=True,
    )
    connection.commit()


def _list_conversations(run: _Run) -> list[dict[str, Any]]:
    """The listed conversations, each once: a conversation listed twice is kept as first
    listed, and as private when the two disagree on whether it is (access fails closed)."""
    types = ",".join(CONVERSATION_TYPES[kind] for kind in run.request.types)
    kept: dict[str, dict[str, Any]] = {}
    for channel in run.client.items(
        "conversations.list",
        "channels",
        types=types,
        exclude_archived="false",
        limit=run.settings.slack_page_size,
    ):
        if not (
            isinstance(channel, dict)
            and isinstance(channel.get("id"), str)
            and channel["id"]
            and _storable(run, "conversations.list", channel)
        ):
            continue
        first = kept.setdefault(channel["id"], channel)
        if first is channel:
            continue
        disagree = conversation_type(first) != conversation_type(channel)
        if disagree and conversation_type(first) == "public_channel":
            first["is_private"] = True
        run.warnings.add(
            "slack:conversations.list",
            f"conversation {channel['id']} listed twice: the first kept"
            + (", as private: the two disagree on whether it is" if disagree else ""),
        )
    return list(kept.values())


def _wanted(run: _Run, listed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The listed conversations to sync (those `--channels` names, else all), and the ids of
    the conversations sync read before, of the types asked for, that are no longer listed
    (with `--channels`, those it names)."""
    requested = {CONVERSATION_TYPES[kind] for kind in run.request.types}
    listed_ids = {entry["id"] for entry in listed}
    unlisted = {
        channel_id: stored
        for channel_id, stored in run.synced_before.items()
        if stored.conversation_type in requested and channel_id not in listed_ids
    }
    if not run.request.channels:
        return listed, sorted(unlisted)
    wanted = {name.lstrip("#") for name in run.request.channels}
    chosen = [c for c in listed if c["id"] in wanted or c.get("name") in wanted]
    gone = sorted(cid for cid, c in unlisted.items() if cid in wanted or c.name in wanted)
    found = {c["id"] for c in chosen} | {str(c.get("name")) for c in chosen}
    found |= set(gone) | {unlisted[cid].name for cid in gone}
    missing = sorted(wanted - found)
    if missing:
        raise SlackqueryError(f"no such conversation(s) for this token: {', '.join(missing)}")
    return chosen, gone


def _members(run: _Run, channel_id: str) -> list[str]:
    return [
        member
        for member in run.client.items(
            "conversations.members",
            "members",
            channel=channel_id,
            limit=run.settings.slack_page_size,
        )
        if isinstance(member, str) and _storable(run, "conversations.members", member)
    ]


def _storable(run: _Run, method: str, entry: Any) -> bool:
    """Whether the store can hold a list entry as JSON (it cannot hold a lone surrogate);
    one it cannot is skipped with a warning."""
    try:
        orjson.dumps(entry)
    except orjson.JSONEncodeError as error:
        label = entry.get("id") if isinstance(entry, dict) else entry
        run.warnings.add(f"slack:{method}", f"{label!r} skipped: not storable as JSON ({error})")
        return False
    return True


def conversation_type(entry: dict[str, Any]) -> str:
    """The canonical conversation type of a Web API conversation object."""
    if entry.get("is_im"):
        return "im"
    if entry.get("is_mpim"):
        return "mpim"
    if entry.get("is_private") or entry.get("is_group"):
        return "private_channel"
    return "public_channel"


def _handle(users: dict[str, dict[str, Any]]) -> Callable[[str], str]:
    def handle(user_id: str) -> str:
        name = (users.get(user_id) or {}).get("name")
        return name if isinstance(name, str) and name else user_id

    return handle


def _skip(run: _Run, entry: dict[str, Any], error: SlackApiError) -> None:
    """A listed conversation the token cannot read, or that Slack answered with an error of
    its own: warn and go on with the others."""
    run.skipped.append({"channel_id": entry["id"], "error": error.error})
    name = entry.get("name")
    _unreadable(run, entry["id"], conversation_type(entry), name, error.error)


def _unreadable(run: _Run, channel_id: str, kind: str, name: object, reason: str) -> None:
    """A conversation this run cannot read, with a warning that says what became of it.

    One a sync read before is no longer kept current, and is closed (`SyncStore.close_conversation`:
    no members, and not public) when nobody may go on searching it on the strength of what
    was stored: a private one whatever the reason, a public one once it is no longer listed
    (deleted, or made private without this token; a bot not in a public channel that is
    still listed gets `not_in_channel`, and the channel stays public).
    """
    stored = run.synced_before.get(channel_id)
    label = (
        f"{kind} {name} ({channel_id})" if name and name != channel_id else f"{kind} {channel_id}"
    )
    where = f"slack:{channel_id}"
    if stored is None:
        run.warnings.add(where, f"{label} skipped: {reason}")
    elif kind not in PRIVATE_TYPES and reason != UNLISTED:
        run.warnings.add(
            where, f"{label} cannot be read ({reason}); its stored copy is no longer kept current"
        )
    elif run.db.close_conversation(run.workspace_id, channel_id, _now(run)):
        # Reported when closed, not on every later run that still cannot read it.
        run.revoked.append({"channel_id": channel_id, "reason": reason})
        made_private = "it is stored as private and " if kind not in PRIVATE_TYPES else ""
        run.warnings.add(
            where,
            f"{label} cannot be read ({reason}); {made_private}its stored member list is "
            "emptied, so only the operator sees it until a sync can read it again",
        )


def _sync_conversation(run: _Run, conversation: _Conversation) -> None:
    """Resume or open the conversation's pass, read its history and threads, close it.

    An error of this conversation's (`ConversationError`) skips it with a warning; its
    pass stays open, and goes on from its checkpoint at its next turn.
    """
    channel_id = conversation.row.channel_id
    current = run.db.channel_pass(run.workspace_id, channel_id)
    if current.open:
        # Before the read: one that fails, skipping the conversation or stopping the
        # run, still moves it behind the others (`_in_turn`).
        run.db.take_turn(run.workspace_id, channel_id, _now(run))
    else:
        _begin_pass(run, channel_id, current.synced_through_ts)  # its turn, too
        current = run.db.channel_pass(run.workspace_id, channel_id)
    try:
        _read_threads(run, channel_id)
        if not current.history_done:
            _read_history(run, channel_id, current)
        if channel_id in run.history_sweep:
            _sweep_history(run, channel_id, current.oldest_ts)
    except ConversationError as error:
        _skip(run, conversation.entry, error)
        return
    run.db.finish_pass(run.workspace_id, channel_id, _now(run))
    run.synced += 1


def _window_start_s(run: _Run) -> float:
    return run.clock.time() - run.settings.slack_reread_days * DAY_S


def _queue_thread_sweep(run: _Run, conversations: list[_Conversation]) -> None:
    """Queue this run's share of the quiet threads (see the module docstring)."""
    settings, now = run.settings, run.clock.time()
    limit = thread_sweep_size(settings, run.client.pacing)
    if not limit:
        return
    since = _since_s(run)  # threads quiet since before it stay as imported
    run.swept_threads = run.db.queue_quiet_threads(
        run.workspace_id,
        [conversation.row.channel_id for conversation in conversations],
        quiet_since_us=int(max(now - settings.slack_thread_sweep_days * DAY_S, since) * 1e6),
        active_since_us=int(max(_window_start_s(run), since) * 1_000_000),
        read_before=datetime.fromtimestamp(now - DAY_S, UTC),
        limit=limit,
    )


def thread_sweep_size(settings: Settings, pacing: Pacing) -> int:
    """Quiet threads a run re-reads at most: `slack_thread_sweep_per_run`, no more than one
    minute of `conversations.replies` allows at this pace; none when the sweep is off."""
    if settings.slack_thread_sweep_days <= 0:
        return 0
    return pacing.calls_in_a_minute("conversations.replies", settings.slack_thread_sweep_per_run)


def _begin_pass(run: _Run, channel_id: str, synced_through: str | None) -> None:
    window_start = _window_start_s(run)
    since = _since_s(run)
    if synced_through is None:
        oldest = since
    else:
        oldest = max(since, min(ts_to_us(synced_through) / 1e6, window_start))
    run.db.begin_pass(
        run.workspace_id,
        channel_id,
        oldest_ts=_ts(oldest),
        latest_ts=_ts(run.clock.time()),
        # A thread last active before --since stays as imported: re-read, it would lose
        # the replies Slack no longer returns.
        active_since_us=int(max(window_start, since) * 1_000_000),
        now=_now(run),
    )


def _since_s(run: _Run) -> float:
    """The run's lower bound (`--since`), in seconds; 0 without one."""
    since = run.request.since
    return datetime(*since.timetuple()[:3], tzinfo=UTC).timestamp() if since else 0.0


def history_sweep_size(settings: Settings, pacing: Pacing) -> int:
    """Conversations whose older history a run re-reads a page of: at most
    `slack_history_sweep_per_run`, no more than one minute of `conversations.history`
    allows at this pace."""
    return pacing.calls_in_a_minute("conversations.history", settings.slack_history_sweep_per_run)


def _sweep_history(run: _Run, channel_id: str, pass_oldest_ts: str | None) -> None:
    """Re-read one page of the conversation's history older than its pass reads, and the
    threads on it that changed (see the module docstring)."""
    assert pass_oldest_ts is not None and run.authors is not None
    before = run.history_sweep[channel_id]
    latest = min((before, pass_oldest_ts), key=ts_to_us) if before else pass_oldest_ts
    oldest = _ts(_since_s(run))
    messages, has_more, observed_at = [], False, _now(run)
    if ts_to_us(latest) > ts_to_us(oldest):  # else the pass read all of it: a turn all the same
        method = "conversations.history"
        params = {
            "channel": channel_id,
            "latest": latest,
            "limit": run.client.pacing.page_size(method, run.settings.slack_page_size),
        }
        if run.request.since:
            params["oldest"] = oldest
        body = run.client.call(method, **params)
        messages, has_more = page_items(method, body, "messages"), bool(body.get("has_more"))
        run.swept_history += 1
    run.db.write_sweep_page(
        run.workspace_id,
        channel_id,
        messages,
        authors=run.authors,
        oldest_ts=oldest,
        latest_ts=latest,
        has_more=has_more,
        observed_at=observed_at,
        queue_threads=_threads_to_read(run, channel_id, messages),
        where=_where(channel_id, HISTORY),
    )
    _read_threads(run, channel_id)


def _ts(seconds: float) -> str:
    micros = max(0, math.floor(seconds * 1_000_000))
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _read_history(run: _Run, channel_id: str, current: Any) -> None:
    """Page the pass's history from its checkpoint; read each page's threads after it."""
    method = "conversations.history"
    params = {
        "channel": channel_id,
        "oldest": current.oldest_ts,
        "latest": current.latest_ts,
        "limit": run.client.pacing.page_size(method, run.settings.slack_page_size),
    }
    where = _where(channel_id, HISTORY)
    pages = _pages(run, method, params, current.cursor, channel_id=channel_id, scope=HISTORY)
    for messages, cursor, observed_at in pages:
        assert run.authors is not None
        run.db.write_page(
            run.workspace_id,
            channel_id,
            messages,
            authors=run.authors,
            scope=HISTORY,
            next_cursor=cursor,
            observed_at=observed_at,
            queue_threads=_threads_to_read(run, channel_id, messages),
            where=where,
        )
        _read_threads(run, channel_id)


def _pages(
    run: _Run,
    method: str,
    params: dict[str, Any],
    cursor: str | None,
    *,
    channel_id: str,
    scope: str,
) -> Iterator[tuple[list[Any], str | None, datetime]]:
    """(messages, next cursor, request time) of each page of a history or thread read.

    The read starts at `cursor`, its saved checkpoint. A cursor Slack rejects
    (`invalid_cursor`: one saved long ago) restarts the read from its first page, once.
    Once `max_minutes` has passed no further page is asked for (`_mind_the_time`).
    """
    trail = CursorTrail(method, cursor)
    restarted = False
    while True:
        _mind_the_time(run)
        observed_at = _now(run)
        try:
            body = run.client.call(method, **params, cursor=cursor)
        except SlackApiError as error:
            if error.error != "invalid_cursor":
                raise
            if restarted:
                raise SlackApiError(
                    method, "invalid_cursor", "again after restarting from the first page"
                ) from error
            run.warnings.add(
                _where(channel_id, scope),
                f"{method}: Slack rejected the saved cursor; read again from the first page",
            )
            run.db.restart_read(run.workspace_id, channel_id, scope)
            restarted, cursor, trail = True, None, CursorTrail(method)
            continue
        try:
            messages = page_items(method, body, "messages")
            cursor = trail.follow(body, len(messages))
        except SlackApiError as error:
            # The run stops (the pass stays open, and is read last next time): say where.
            where = "; ".join(filter(None, [error.detail, _where(channel_id, scope)]))
            raise SlackApiError(method, error.error, where) from error
        yield messages, cursor, observed_at
        _report(run)
        if cursor is None:
            return


def _where(channel_id: str, scope: str) -> str:
    """Where a warning about a page of this read points."""
    return f"slack:{channel_id}" if scope == HISTORY else f"slack:{channel_id}:{scope}"


def _threads_to_read(run: _Run, channel_id: str, messages: list[Any]) -> list[str]:
    """Parents on this page whose thread changed since stored, or was recently active.

    Changed: the store lacks the parent, or holds another `latest_reply` / `reply_count`
    (a broadcast reply already read from history does not count as having the thread).
    """
    parents = {
        message["ts"]: message
        for message in messages
        if isinstance(message, dict)
        and isinstance(message.get("ts"), str)
        and message.get("thread_ts") == message["ts"]
        and message.get("reply_count")
        and isinstance(message.get("latest_reply"), str)
    }
    stored = run.db.stored_thread_heads(run.workspace_id, channel_id, list(parents))
    window_start_us = int(_window_start_s(run) * 1_000_000)
    wanted = []
    for thread_ts, parent in parents.items():
        try:  # staging skips (with a warning) a message whose ts does not parse
            ts_to_us(thread_ts)
            latest_us = ts_to_us(parent["latest_reply"])
        except ValueError:
            continue
        head = (parent["latest_reply"], parent["reply_count"])
        if stored.get(thread_ts) != head or latest_us >= window_start_us:
            wanted.append(thread_ts)
    return wanted


def _read_threads(run: _Run, channel_id: str) -> None:
    """Drain the channel's queued threads, each from its own checkpoint."""
    method = "conversations.replies"
    limit = run.client.pacing.page_size(method, run.settings.slack_page_size)
    for thread_ts, cursor in run.db.pending_threads(run.workspace_id, channel_id):
        params = {"channel": channel_id, "ts": thread_ts, "limit": limit}
        where = _where(channel_id, thread_ts)
        try:
            for messages, next_page, observed_at in _pages(
                run, method, params, cursor, channel_id=channel_id, scope=thread_ts
            ):
                assert run.authors is not None
                run.db.write_page(
                    run.workspace_id,
                    channel_id,
                    messages,
                    authors=run.authors,
                    scope=thread_ts,
                    next_cursor=next_page,
                    observed_at=observed_at,
                    where=where,
                )
        except SlackApiError as error:
            if error.error != "thread_not_found":
                raise
            run.db.forget_thread(run.workspace_id, channel_id, thread_ts, _now(run))


def _report(run: _Run) -> None:
    done, total = run.position
    run.progress.update(done, total, _eta_s(run, total - done), run.db.pages_written)


def _eta_s(run: _Run, conversations_left: int) -> float:
    """Least time left at this pace: one history request per conversation still to read."""
    return run.client.limiter.remaining_s("conversations.history", conversations_left)


def summary(run: _Run, elapsed_s: float) -> dict[str, Any]:
    """Conversations, requests per method, rows changed, time spent waiting on rate limits."""
    client = run.client
    return {
        "run_id": run.run_id,
        "workspace_id": run.workspace_id,
        "conversations": run.synced,
        "skipped": run.skipped,
        "revoked": run.revoked,
        "deferred": run.deferred,
        "swept_threads": run.swept_threads,
        "swept_history": run.swept_history,
        "requests": dict(sorted(client.requests.items())),
        "request_count": sum(client.requests.values()),
        "retries": dict(sorted(client.retries.items())),
        "counts": run.db.counts,
        "rate_limit_wait_s": round(client.limiter.waited_s, 3),
        "pacing": client.pacing.name,
        "duration_s": round(elapsed_s, 3),
        "warning_count": run.warnings.count,
        "warnings": run.warnings.items,
    }
