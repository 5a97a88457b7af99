"""The embedding work queue: durable rows in the state DuckDB, the source of truth across runs.

Tables (contract in docs/architecture.md, owner `flows/embed.py`):
`embedding_generations` records each generation identity once;
`embedding_work_items` holds one row per (document_id, generation_id, text_hash) with its
state, attempts, lease, retry time, last error and, once succeeded, the stored vector;
`embedding_runs` one row per run that embedded something (documents, wall time), whose
measured rate projects the time to full coverage.

Attempts. `attempt_count` counts the attempts charged to a document: leasing charges one up
front, so an attempt that dies with its process still counts. A transient batch failure
(the endpoint down, rate limiting, timing out or answering garbage) says nothing about the
documents, so it refunds that charge (`record_transient_failures`), and so does a run
releasing its own claims when interrupted (`release_claims`). Only an item failure (the
endpoint rejecting that document, an invalid vector for its row) can end an item
`terminal_failed`, once `attempt_count` reaches `embedding_max_attempts`.
`transient_failures` counts an item's transient failures in a row; it only grows the
backoff through a long outage. `retry_failed` gives terminal items another chance.

Why rows and not Prefect results: a SIGKILLed run leaves its claims behind as leases, and
the next run (Prefect or plain) reclaims them from here. Every function commits its own
transaction, so each batch's outcome is durable the moment the call returns.
"""

import json
import os
import socket
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import psutil

from slackquery.duckdb_setup import open_database
from slackquery.embedding.base import GenerationIdentity
from slackquery.embedding.current import CURRENT_ITEMS, CURRENT_VECTORS, WANTED_DOCUMENTS
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder

STATES = ("pending", "in_progress", "succeeded", "retryable_failed", "terminal_failed")

SCHEMA = """
create table if not exists embedding_generations (
    generation_id varchar primary key,
    identity_json json not null,
    config_hash varchar not null,
    created_at timestamptz not null
);
create table if not exists embedding_work_items (
    document_id varchar not null,
    generation_id varchar not null,
    text_hash varchar not null,
    state varchar not null,
    attempt_count integer not null default 0,
    lease_id varchar,
    lease_expires_at timestamptz,
    next_attempt_at timestamptz,
    error_class varchar,
    error_message varchar,
    embedding float[],
    embedded_at timestamptz,
    updated_at timestamptz not null,
    primary key (document_id, generation_id, text_hash)
);
create table if not exists embedding_runs (
    generation_id varchar not null,
    finished_at timestamptz not null,
    documents integer not null,
    elapsed_s double not null
);
"""
# Columns added after the first layout, idempotent so an existing state DB upgrades on its
# next run. Kept out of SCHEMA's `create table`: DuckDB cannot add a column with a NOT NULL
# constraint, so old and new files have the same (nullable, defaulted) column either way.
MIGRATIONS = """
alter table embedding_work_items add column if not exists transient_failures integer default 0;
"""
# Runs whose rate `embedding-status` averages for its projection.
RATE_RUNS = 5


@dataclass(frozen=True)
class ClaimedItem:
    """One leased work item and the text to embed."""

    document_id: str
    text_hash: str
    text: str
    attempt_count: int
    transient_failures: int = 0


@dataclass(frozen=True)
class Claim:
    """A batch of items leased together under one lease id."""

    lease_id: str
    items: tuple[ClaimedItem, ...]


def connect(state_path: Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the state DB; a missing, busy or damaged file is a user error, not a crash."""
    if read_only and not state_path.exists():
        raise SlackqueryError(f"state database {state_path} does not exist; run the projection")
    if not read_only:
        make_folder(state_path.parent)
    return open_database(str(state_path), read_only=read_only, what="state database")


@contextmanager
def transaction(connection: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Run a block in one transaction: committed on success, rolled back on any error."""
    connection.execute("begin transaction")
    try:
        yield connection
    except BaseException:
        connection.execute("rollback")
        raise
    connection.execute("commit")


def ensure_schema(connection: duckdb.DuckDBPyConnection) -> None:
    """Create the embedding tables if they are missing and add later columns (idempotent)."""
    connection.execute(SCHEMA)
    connection.execute(MIGRATIONS)


def has_table(connection: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the state DB has table `name` in its main schema."""
    row = connection.execute(
        "select count(*) from duckdb_tables() where schema_name = 'main' and table_name = ?",
        [name],
    ).fetchone()
    return bool(row and row[0])


def require_documents(connection: duckdb.DuckDBPyConnection, state_path: Path) -> None:
    """Fail clearly when the projection has not produced `search_documents` yet."""
    if not has_table(connection, "search_documents"):
        raise SlackqueryError(
            f"state database {state_path} has no search_documents table; run the projection "
            "(`slackquery project`) before embedding"
        )


def register_generation(
    connection: duckdb.DuckDBPyConnection, identity: GenerationIdentity, now: datetime
) -> None:
    """Record the generation identity once; a different identity under the same id is a bug."""
    identity_json = json.dumps(identity.to_dict(), sort_keys=True)
    row = connection.execute(
        "select identity_json from embedding_generations where generation_id = ?",
        [identity.generation_id],
    ).fetchone()
    if row is None:
        connection.execute(
            "insert into embedding_generations values (?, ?, ?, ?)",
            [identity.generation_id, identity_json, identity.config_hash, now],
        )
    elif json.loads(row[0]) != json.loads(identity_json):
        raise SlackqueryError(
            f"generation {identity.generation_id!r} is recorded with a different identity"
        )


def enqueue(connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime) -> int:
    """Add a pending item for every wanted document lacking one at its current text hash.

    An unchanged corpus inserts nothing (one anti-join), which is what keeps a no-op
    re-run fast. Edited text gets a new row under its new hash; the old row stays as history.
    Rows are stored in document order, the order claims take them in, so a batch's keys lie
    in few row groups and leasing it skips the others (52 against 78 ms a batch, 1M pending).
    """
    row = connection.execute(
        f"""
        insert into embedding_work_items
            (document_id, generation_id, text_hash, state, attempt_count, updated_at)
        select wanted.document_id, $generation_id, wanted.text_hash, 'pending', 0, $now
        from ({WANTED_DOCUMENTS}) as wanted
        anti join (
            select document_id, text_hash from embedding_work_items
            where generation_id = $generation_id
        ) as existing
            on existing.document_id = wanted.document_id
            and existing.text_hash = wanted.text_hash
        order by wanted.document_id
        """,
        {"generation_id": generation_id, "now": now},
    ).fetchone()
    return int(row[0]) if row else 0


# -- leases ------------------------------------------------------------------------------
def new_lease_id() -> str:
    """`host:pid:process-start-ms:random`, so a later run can tell a dead owner's lease."""
    process = psutil.Process(os.getpid())
    started_ms = int(process.create_time() * 1000)
    return f"{socket.gethostname()}:{os.getpid()}:{started_ms}:{uuid.uuid4().hex[:12]}"


def lease_owner_is_dead(lease_id: str) -> bool:
    """True when the lease's owner process on this host is gone (or is a reused pid).

    Leases of other hosts, or in an unknown format, are never judged dead: they wait for
    their expiry like the design says.
    """
    parts = lease_id.split(":")
    if len(parts) != 4 or parts[0] != socket.gethostname():
        return False
    try:
        pid, started_ms = int(parts[1]), int(parts[2])
    except ValueError:
        return False
    try:
        process = psutil.Process(pid)
        return int(process.create_time() * 1000) != started_ms
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _dead_owners_leases(
    connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime
) -> list[str]:
    """The leases of in-progress items, not yet run out, whose owner process is gone."""
    return [
        lease_id
        for (lease_id,) in connection.execute(
            "select distinct lease_id from embedding_work_items "
            "where generation_id = ? and state = 'in_progress' and lease_expires_at > ?",
            [generation_id, now],
        ).fetchall()
        if lease_id and lease_owner_is_dead(lease_id)
    ]


def release_dead_leases(
    connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime
) -> int:
    """Expire leases held by processes that no longer exist, so their items are reclaimable.

    A SIGKILLed run cannot release its own claims; waiting out a 15-minute lease would stall
    the next run for nothing when the owner is provably dead. The attempt it spent is kept,
    so a document that crashes the model every time still ends terminal.
    """
    leases = _dead_owners_leases(connection, generation_id, now)
    if leases:
        connection.execute(
            "update embedding_work_items set lease_expires_at = ? "
            "where generation_id = ? and state = 'in_progress' and list_contains(?, lease_id)",
            [now, generation_id, leases],
        )
    return len(leases)


# Whether an item may be leased now; also re-checked on the rows being leased.
CLAIMABLE_NOW = """
    (items.state = 'pending'
        or (items.state = 'retryable_failed' and items.next_attempt_at <= $now)
        or (items.state = 'in_progress' and items.lease_expires_at <= $now))
"""
CLAIMABLE = f"from ({CURRENT_ITEMS}) as items where {CLAIMABLE_NOW}"
# Claimable items read ahead per query. Finding them joins every work item of the generation
# with the wanted documents (0.38 s with 1M pending, measured), so each lease of a batch
# reading them afresh cost a fifth of a 1M-message run at 128 documents a batch.
CLAIM_WINDOW = 4096


def count_claimable(
    connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime
) -> int:
    """How many items a run could claim right now (the progress bar's total)."""
    row = connection.execute(
        f"select count(*) {CLAIMABLE}", {"generation_id": generation_id, "now": now}
    ).fetchone()
    return int(row[0]) if row else 0


def next_claimable(
    connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime, limit: int
) -> list[ClaimedItem]:
    """Up to `limit` claimable items with their text, oldest work first (`updated_at`, then
    `document_id`, so the order is deterministic); nothing is leased yet."""
    rows = connection.execute(
        f"""
        select items.document_id, items.text_hash, items.text_embedding, items.attempt_count,
            coalesce(items.transient_failures, 0)
        {CLAIMABLE}
        order by items.updated_at, items.document_id
        limit $limit
        """,
        {"generation_id": generation_id, "now": now, "limit": limit},
    ).fetchall()
    return [ClaimedItem(row[0], row[1], row[2] or "", int(row[3]), int(row[4])) for row in rows]


def lease_items(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    candidates: Sequence[ClaimedItem],
    *,
    lease_s: int,
    now: datetime,
    lease_id: str | None = None,
) -> Claim:
    """Lease those of `candidates` that are still claimable, in one transaction.

    Leasing charges an attempt (`attempt_count` + 1), so an attempt that dies with its
    process still counts; a transient failure or a release refunds it.
    """
    lease_id = lease_id or new_lease_id()
    if not candidates:
        return Claim(lease_id, ())
    with transaction(connection):
        leased = connection.execute(
            f"""
            update embedding_work_items as items
            set state = 'in_progress', lease_id = $lease_id, lease_expires_at = $expires,
                attempt_count = items.attempt_count + 1, updated_at = $now
            from (select unnest($ids) as document_id, unnest($hashes) as text_hash) as batch
            where items.generation_id = $generation_id
                and items.document_id = batch.document_id
                and items.text_hash = batch.text_hash
                and {CLAIMABLE_NOW}
            returning items.document_id, items.text_hash, items.attempt_count
            """,
            {
                "lease_id": lease_id,
                "expires": now + timedelta(seconds=lease_s),
                "now": now,
                "generation_id": generation_id,
                "ids": [item.document_id for item in candidates],
                "hashes": [item.text_hash for item in candidates],
            },
        ).fetchall()
    attempts = {(row[0], row[1]): int(row[2]) for row in leased}
    items = tuple(
        replace(item, attempt_count=attempts[(item.document_id, item.text_hash)])
        for item in candidates
        if (item.document_id, item.text_hash) in attempts
    )
    return Claim(lease_id, items)


class ClaimQueue:
    """Leases batches in claimable order from a window of items read ahead.

    Only this process writes the state DB while its run holds the connection, so what the
    window read stays claimable unless this run leased or recorded it since; `lease_items`
    re-checks anyway. Work that becomes claimable meanwhile (a retry falling due, an expired
    lease) is found when the window runs dry, as it sorts after the window's older work.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, generation_id: str):
        self.connection = connection
        self.generation_id = generation_id
        self._window: deque[ClaimedItem] = deque()

    def claim(
        self, limit: int, *, lease_s: int, now: datetime, lease_id: str | None = None
    ) -> Claim:
        """Lease up to `limit` items; an empty claim means nothing is claimable now."""
        refilled = False
        while True:
            if not self._window and not refilled:
                window = max(limit, CLAIM_WINDOW)
                self._window.extend(
                    next_claimable(self.connection, self.generation_id, now, window)
                )
                refilled = True
            if not self._window:
                return Claim(lease_id or new_lease_id(), ())
            count = min(limit, len(self._window))
            candidates = [self._window.popleft() for _ in range(count)]
            claim = lease_items(
                self.connection,
                self.generation_id,
                candidates,
                lease_s=lease_s,
                now=now,
                lease_id=lease_id,
            )
            if claim.items:
                return claim


def record_successes(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    lease_id: str,
    items: Sequence[ClaimedItem],
    vectors: np.ndarray,
    now: datetime,
) -> int:
    """Store vectors for items still leased to `lease_id`; returns how many were stored.

    The lease check means a run whose lease expired and was reclaimed elsewhere cannot
    overwrite the newer owner's outcome, so a succeeded item is written once.
    """
    if not items:
        return 0
    # A frame of NumPy rows, scanned by DuckDB: passing the vectors as a nested list
    # parameter cost ~7x more per batch, a sixth of the run at 80 documents/s.
    batch = pd.DataFrame(  # noqa: F841 (scanned)
        {
            "document_id": [item.document_id for item in items],
            "text_hash": [item.text_hash for item in items],
            "embedding": list(np.asarray(vectors, dtype=np.float32)),
        }
    )
    with transaction(connection):
        row = connection.execute(
            """
            update embedding_work_items as items
            set state = 'succeeded', embedding = batch.embedding::float[], embedded_at = $now,
                updated_at = $now, lease_id = null, lease_expires_at = null,
                next_attempt_at = null, error_class = null, error_message = null
            from batch
            where items.generation_id = $generation_id
                and items.document_id = batch.document_id
                and items.text_hash = batch.text_hash
                and items.state = 'in_progress' and items.lease_id = $lease_id
            """,
            {"now": now, "generation_id": generation_id, "lease_id": lease_id},
        ).fetchone()
    return int(row[0]) if row else 0


def record_failures(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    lease_id: str,
    items: Sequence[ClaimedItem],
    *,
    error_class: str,
    error_message: str,
    next_attempt_at: datetime,
    max_attempts: int,
    now: datetime,
) -> int:
    """Record an item failure (the endpoint rejected these documents, or their vectors were
    invalid): `terminal_failed` once they used `max_attempts`, else retryable."""
    return _settle_leased(
        connection,
        generation_id,
        lease_id,
        items,
        """state = case when items.attempt_count >= $max_attempts
            then 'terminal_failed' else 'retryable_failed' end,
        next_attempt_at = case when items.attempt_count >= $max_attempts
            then null else $next_attempt_at end,
        transient_failures = 0""",
        {"max_attempts": max_attempts, "next_attempt_at": next_attempt_at},
        error_class=error_class,
        error_message=error_message,
        now=now,
    )


def record_transient_failures(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    lease_id: str,
    items: Sequence[ClaimedItem],
    *,
    error_class: str,
    error_message: str,
    next_attempt_at: datetime,
    now: datetime,
) -> int:
    """Record a transient batch failure: the items wait until `next_attempt_at`, uncharged.

    An outage or rate limit says nothing about the documents, so the attempt the lease
    charged is refunded and the items never move toward `terminal_failed`;
    `transient_failures` grows instead, which grows the backoff.
    """
    return _settle_leased(
        connection,
        generation_id,
        lease_id,
        items,
        """state = 'retryable_failed', next_attempt_at = $next_attempt_at,
        attempt_count = greatest(items.attempt_count - 1, 0),
        transient_failures = coalesce(items.transient_failures, 0) + 1""",
        {"next_attempt_at": next_attempt_at},
        error_class=error_class,
        error_message=error_message,
        now=now,
    )


def _settle_leased(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    lease_id: str,
    items: Sequence[ClaimedItem],
    assignments: str,
    parameters: dict[str, object],
    *,
    error_class: str,
    error_message: str,
    now: datetime,
) -> int:
    """Record a failure of the items still leased to `lease_id`: `assignments` (a SET
    clause of constant SQL, its values in `parameters`) plus the error and the lease
    released; how many were updated. The lease check keeps a run whose lease was reclaimed
    from overwriting the new owner."""
    if not items:
        return 0
    with transaction(connection):
        row = connection.execute(
            f"""
            update embedding_work_items as items
            set {assignments},
                error_class = $error_class, error_message = $error_message,
                lease_id = null, lease_expires_at = null, updated_at = $now
            from (select unnest($ids) as document_id, unnest($hashes) as text_hash) as batch
            where items.generation_id = $generation_id
                and items.document_id = batch.document_id
                and items.text_hash = batch.text_hash
                and items.state = 'in_progress' and items.lease_id = $lease_id
            """,
            {
                **parameters,
                "error_class": error_class,
                "error_message": error_message[:1000],
                "now": now,
                "ids": [item.document_id for item in items],
                "hashes": [item.text_hash for item in items],
                "generation_id": generation_id,
                "lease_id": lease_id,
            },
        ).fetchone()
    return int(row[0]) if row else 0


def release_claims(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    lease_ids: Sequence[str],
    now: datetime,
) -> int:
    """Hand a live run's own unrecorded claims back as pending, refunding their attempt.

    For a run that stops before recording them (Ctrl-C): nothing was learnt about these
    documents, and leaving the leases would make the next run charge them again.
    """
    if not lease_ids:
        return 0
    with transaction(connection):
        row = connection.execute(
            """
            update embedding_work_items as items
            set state = 'pending', attempt_count = greatest(items.attempt_count - 1, 0),
                lease_id = null, lease_expires_at = null, updated_at = $now
            where items.generation_id = $generation_id and items.state = 'in_progress'
                and list_contains($lease_ids, items.lease_id)
            """,
            {"now": now, "generation_id": generation_id, "lease_ids": list(lease_ids)},
        ).fetchone()
    return int(row[0]) if row else 0


def retry_failed(connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime) -> int:
    """Give the generation's `terminal_failed` items (at their current text) another chance:
    pending again with no attempts charged. Returns how many were reset."""
    row = connection.execute(
        f"""
        update embedding_work_items as items
        set state = 'pending', attempt_count = 0, transient_failures = 0,
            next_attempt_at = null, error_class = null, error_message = null,
            lease_id = null, lease_expires_at = null, updated_at = $now
        from ({WANTED_DOCUMENTS}) as wanted
        where items.generation_id = $generation_id and items.state = 'terminal_failed'
            and items.document_id = wanted.document_id and items.text_hash = wanted.text_hash
        """,
        {"now": now, "generation_id": generation_id},
    ).fetchone()
    return int(row[0]) if row else 0


# -- reporting ---------------------------------------------------------------------------
def state_counts(connection: duckdb.DuckDBPyConnection, generation_id: str) -> dict[str, int]:
    """Counts by state of the items for wanted documents at their current text."""
    counts = dict.fromkeys(STATES, 0)
    rows = connection.execute(
        f"select state, count(*) from ({CURRENT_ITEMS}) as items group by 1",
        {"generation_id": generation_id},
    ).fetchall()
    counts.update({state: int(count) for state, count in rows})
    return counts


def abandoned_claims(
    connection: duckdb.DuckDBPyConnection, generation_id: str, now: datetime
) -> int:
    """How many `in_progress` items no run is working on: their lease ran out, or its owner
    on this host is gone (a killed run). The next run claims them again."""
    row = connection.execute(
        f"select count(*) from ({CURRENT_ITEMS}) as items where state = 'in_progress' "
        "and (lease_expires_at <= $now or list_contains($dead, lease_id))",
        {
            "generation_id": generation_id,
            "now": now,
            "dead": _dead_owners_leases(connection, generation_id, now),
        },
    ).fetchone()
    return int(row[0]) if row else 0


def coverage(connection: duckdb.DuckDBPyConnection, generation_id: str) -> dict[str, object]:
    """Wanted documents, how many have a vector at their current text, and the ratio."""
    row = connection.execute(
        f"""
        select count(*), count(current_vectors.document_id)
        from ({WANTED_DOCUMENTS}) as wanted
        left join ({CURRENT_VECTORS}) as current_vectors
            on current_vectors.document_id = wanted.document_id
        """,
        {"generation_id": generation_id},
    ).fetchone()
    wanted, embedded = (int(row[0]), int(row[1])) if row else (0, 0)
    return {
        "wanted_documents": wanted,
        "embedded_documents": embedded,
        "missing_documents": wanted - embedded,
        "coverage": round(embedded / wanted, 6) if wanted else 1.0,
    }


def record_run(
    connection: duckdb.DuckDBPyConnection,
    generation_id: str,
    documents: int,
    elapsed_s: float,
    now: datetime,
) -> None:
    """Remember a run's throughput (runs that embedded nothing say nothing about it)."""
    if documents > 0:
        connection.execute(
            "insert into embedding_runs values (?, ?, ?, ?)",
            [generation_id, now, documents, elapsed_s],
        )


def next_retry_at(connection: duckdb.DuckDBPyConnection, generation_id: str) -> datetime | None:
    """When the first of the generation's retryable_failed items becomes claimable again."""
    row = connection.execute(
        f"select min(next_attempt_at) from ({CURRENT_ITEMS}) as items "
        "where state = 'retryable_failed'",
        {"generation_id": generation_id},
    ).fetchone()
    return row[0] if row else None


def measured_rate(connection: duckdb.DuckDBPyConnection, generation_id: str) -> float | None:
    """Documents/s over the generation's last RATE_RUNS runs, or None before any run."""
    if not has_table(connection, "embedding_runs"):
        return None
    row = connection.execute(
        """
        select sum(documents) / nullif(sum(elapsed_s), 0) from (
            select documents, elapsed_s from embedding_runs where generation_id = ?
            order by finished_at desc limit ?
        )
        """,
        [generation_id, RATE_RUNS],
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else None
