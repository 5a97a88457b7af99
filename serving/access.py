"""Who is asking, and which artifact rows they may see.

A `Requester` is one Slack user of one workspace (from a grant's token over HTTP, or
`--as` on the CLI); None everywhere means the local operator or the admin token, who see
everything. A requester sees the public channels of their workspace and the private
channels, DMs and group DMs whose membership (the artifact's `channel_members`) includes
them; `no_dms` drops DMs and group DMs. Nothing of another workspace; nothing at all to an
account Slack has deactivated, and to a guest only the conversations it is a member of,
public channels included (`limited_accounts`). The visibility is a
row mask computed once per requester and artifact (`LoadedArtifact.visibility`), and the
engine folds it into every query's mask, name resolution and lookup, so a forbidden
object and a nonexistent one get the same answer.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from slackquery.artifacts.pointer import PUBLISH_FIRST, current_artifact
from slackquery.artifacts.schema import vector_coverage
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

if TYPE_CHECKING:
    from serving.artifact import LoadedArtifact

DIRECT_TYPES = ("dm", "group_dm")
# The requester of the HTTP request being served (set by the server's guard; None: admin).
current_requester: contextvars.ContextVar[Requester | None] = contextvars.ContextVar(
    "current_requester", default=None
)


@dataclass(frozen=True)
class Requester:
    """One Slack user of one workspace, as whom a query runs."""

    user_id: str
    workspace_id: str
    no_dms: bool = False

    @property
    def key(self) -> str:
        """What binds cursors and caches to this requester."""
        return f"{self.workspace_id}:{self.user_id}:{'no-dms' if self.no_dms else 'all'}"


@dataclass(frozen=True)
class Visibility:
    """A requester's view of one artifact: visible rows and (workspace, channel) pairs."""

    rows: np.ndarray
    channels: frozenset[tuple[str, str]]
    workspace_id: str
    vector_positions: np.ndarray  # matrix positions of the visible message vectors
    document_count: int  # visible documents of any kind: BM25's N for this requester
    # The share of visible messages semantic ranking reaches: the artifact's own share would
    # tell a requester how many messages they may not see.
    vector_coverage: float
    # The first and last visible posting time, and which author codes wrote a visible row:
    # the artifact's own would date a hidden message, or make its author a known name.
    time_span_us: tuple[int, int]
    authors: np.ndarray  # bool per author code
    # Visible document frequency per term id, filled as queries use the terms: a common
    # term's postings need not be re-counted on every query of this requester.
    term_frequencies: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def frequency(self, term_id: int, posting_rows: np.ndarray) -> int:
        """How many visible rows hold the term whose postings are `posting_rows`."""
        found = self.term_frequencies.get(term_id)
        if found is None:
            found = int(np.count_nonzero(self.rows[posting_rows]))
            self.term_frequencies[term_id] = found  # same value from any thread: no lock
        return found


def channel_of(document_id: str) -> tuple[str, str] | None:
    """(workspace, channel) of a message or thread id `W:C:ts`, None for any other shape."""
    pieces = document_id.split(":")
    return (pieces[0], pieces[1]) if len(pieces) == 3 else None


def rows_with_codes(codes: np.ndarray, wanted: Sequence[int], vocabulary_size: int) -> np.ndarray:
    """Which rows' code is one of `wanted`. One code: a comparison; more: one gather
    through a per-code lookup table, O(rows) however many (np.isin compares once per
    code, ~4 ms a code at 1M rows)."""
    if not wanted:
        return np.zeros(len(codes), dtype=bool)
    if len(wanted) == 1:
        return codes == wanted[0]
    wanted_code = np.zeros(vocabulary_size, dtype=bool)
    wanted_code[np.asarray(wanted, dtype=np.int64)] = True
    return wanted_code[codes]


def may_see(
    requester: Requester, conversation_type: str, is_member: bool, limit: str | None = None
) -> bool:
    """Whether `requester` may see a conversation of their workspace: a public channel, or
    one they are a member of (unless it is a DM or group DM and they asked for none). An
    account's `limit` narrows that: a guest sees only what it is a member of, a
    deactivated account nothing."""
    if limit == "deactivated":
        return False
    direct = conversation_type in DIRECT_TYPES
    public = conversation_type == "public" and limit != "guest"
    return public or (is_member and not (requester.no_dms and direct))


def compute_visibility(artifact: LoadedArtifact, requester: Requester) -> Visibility:
    """The rows and channels `requester` may see in `artifact` (see the module docstring)."""
    account = (requester.workspace_id, requester.user_id)
    member_of = artifact.memberships.get(account, set())
    limit = artifact.account_limits.get(account)
    channels = {
        (workspace, channel)
        for workspace, channel, _name, kind, *_counts in artifact.channels
        if workspace == requester.workspace_id
        and may_see(requester, kind, channel in member_of, limit)
    }
    workspace_code = artifact.workspace_code_of.get(requester.workspace_id, -1)
    channel_codes = [
        artifact.channel_code_of[channel]
        for _, channel in channels
        if channel in artifact.channel_code_of
    ]
    rows = (artifact.workspace_codes == workspace_code) & rows_with_codes(
        artifact.channel_codes, channel_codes, len(artifact.channel_code_of)
    )
    rows.setflags(write=False)  # shared by every query of this requester
    vector_positions = artifact.message_vector_positions(rows)
    messages = int(np.count_nonzero(artifact.is_message & rows))
    times = artifact.ts_us[rows]
    authors = np.zeros(len(artifact.author_code_of), dtype=bool)
    written = artifact.author_codes[rows]
    authors[written[written >= 0]] = True
    return Visibility(
        rows=rows,
        channels=frozenset(channels),
        workspace_id=requester.workspace_id,
        vector_positions=vector_positions,
        document_count=int(np.count_nonzero(rows)),
        vector_coverage=vector_coverage(len(vector_positions), messages),
        time_span_us=(int(times.min()), int(times.max())) if times.size else (0, 0),
        authors=authors,
    )


def account_limits(conn: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], str]:
    """(workspace, user) -> the limit an artifact records for the account (`deactivated`,
    `guest`); artifacts of schema 8 and before record none."""
    try:
        rows = conn.execute(
            "select workspace_id, user_id, account_limit from limited_accounts"
        ).fetchall()
    except duckdb.CatalogException:
        return {}
    return {(workspace, user): limit for workspace, user, limit in rows}


def limit_of(conn: duckdb.DuckDBPyConnection, requester: Requester) -> str | None:
    """The limit an artifact records for the requester's account, if any."""
    return account_limits(conn).get((requester.workspace_id, requester.user_id))


def published_account_limits(settings: Settings) -> dict[tuple[str, str], str]:
    """The account limits of the published artifact (none without one)."""
    path = current_artifact(settings)
    return {} if path is None else account_limits_at(path)


def account_limits_at(path: Path) -> dict[tuple[str, str], str]:
    """The account limits of the artifact file at `path` (a plain read: no extension
    loads, so the HTTP guard may call it on its event loop)."""
    conn = open_database(str(path), read_only=True, what="search artifact")
    try:
        return account_limits(conn)
    finally:
        conn.close()


def resolve_requester(
    conn: duckdb.DuckDBPyConnection,
    user: str,
    workspace: str | None,
    no_dms: bool = False,
    active_only: bool = False,
) -> Requester:
    """`U…`, `@name` or a bare name (handle, display or real name), optionally of one
    workspace (id, slug or name), resolved against an artifact's users and members; unknown
    or ambiguous values are an error, and so, with `active_only`, is a deactivated account.
    A bare value matches a user id or a name."""
    wanted = user.strip()
    by_name = wanted.startswith("@")
    text = wanted.lstrip("@").casefold()
    rows = conn.execute(
        """
        with people as (
            select workspace_id, user_id, user_name, username, real_name, display_name
            from users
            union all
            select workspace_id, user_id, null, null, null, null
            from channel_members
            where is_workspace_user
        )
        select distinct people.workspace_id, people.user_id
        from people
        inner join workspaces on people.workspace_id = workspaces.workspace_id
        where (
            $text in (
                lower(people.user_name), lower(people.username),
                lower(people.real_name), lower(people.display_name)
            )
            or (not $by_name and people.user_id = $user)
        )
        and (
            $workspace is null
            or lower($workspace) in (
                lower(workspaces.workspace_id), lower(workspaces.workspace_slug),
                lower(workspaces.workspace_name)
            )
        )
        order by 1, 2
        """,
        {"by_name": by_name, "text": text, "user": wanted, "workspace": workspace},
    ).fetchall()
    where = f" in workspace {workspace!r}" if workspace else ""
    if not rows:
        if workspace is not None:
            _require_workspace(conn, workspace)
        raise SlackqueryError(f"unknown user {user!r}{where} in the published artifact")
    if len(rows) > 1:
        found = ", ".join(f"{ws}:{uid}" for ws, uid in rows)
        raise SlackqueryError(
            f"user {user!r}{where} is ambiguous ({found}); pass --workspace or a user id"
        )
    requester = Requester(user_id=rows[0][1], workspace_id=rows[0][0], no_dms=no_dms)
    if active_only and limit_of(conn, requester) == "deactivated":
        raise SlackqueryError(
            f"user {user!r}{where} ({requester.workspace_id}:{requester.user_id}) is "
            "deactivated in Slack: a deactivated account sees nothing, so it gets no grant"
        )
    return requester


def _require_workspace(conn: duckdb.DuckDBPyConnection, workspace: str) -> None:
    """Raise naming the artifact's workspaces unless `workspace` is one of their ids,
    slugs or names (the operator resolves requesters, and sees every workspace)."""
    known = conn.execute(
        "select workspace_slug, workspace_id, workspace_name from workspaces order by 1"
    ).fetchall()
    labels = {label.casefold() for row in known for label in row if label}
    if workspace.casefold() not in labels:
        listed = ", ".join(f"{slug} ({workspace_id}, {name})" for slug, workspace_id, name in known)
        raise SlackqueryError(
            f"unknown workspace {workspace!r} in the published artifact; it has: {listed}"
        )


def published_requester(
    settings: Settings,
    user: str,
    workspace: str | None,
    no_dms: bool = False,
    active_only: bool = False,
) -> Requester:
    """`resolve_requester` against the published artifact (grants and `--as`)."""
    with _published_artifact(settings, "resolve users against") as conn:
        return resolve_requester(conn, user, workspace, no_dms, active_only)


def published_user_name(settings: Settings, requester: Requester) -> str | None:
    """The requester's name in the published artifact (None for a member the export
    listed by id alone)."""
    with _published_artifact(settings, "name users from") as conn:
        row = conn.execute(
            "select user_name from users where workspace_id = $workspace and user_id = $user",
            {"workspace": requester.workspace_id, "user": requester.user_id},
        ).fetchone()
    return row[0] if row else None


@contextmanager
def _published_artifact(settings: Settings, to: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to the published artifact, or an error saying there is none
    to `to` (`resolve users against`)."""
    path = current_artifact(settings)
    if path is None:
        raise SlackqueryError(f"no published search artifact to {to}; {PUBLISH_FIRST}")
    conn = open_database(str(path), read_only=True)
    try:
        yield conn
    finally:
        conn.close()
