"""What a build reads from the state database: source watermark, generation, coverage.

Everything here reads the dbt marts and the embedding tables, never canonical: the state
marts are exactly what an artifact is built from, so a watermark over them changes
whenever the artifact's content would.
"""

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from slackquery.embedding import GenerationIdentity, configured_identity
from slackquery.embedding.current import CURRENT_ITEMS, WANTED_DOCUMENTS
from slackquery.errors import SlackqueryError
from slackquery.projection import (
    latest_projection,
    project_fingerprint,
    tests_passed,
    unrecorded_dbt_run,
)
from slackquery.settings import Settings

# The document counts and the newest payload hash, then per mart an order-independent
# 128-bit digest of every row (all columns, tombstones included). A renamed channel or user
# changes rows without changing a payload hash, and a membership change touches no
# document at all: each is seen by its mart's digest.
DOCUMENT_COUNTS_SQL = """
select
    count(*),
    count(*) filter (where is_active),
    count(*) filter (where is_active and document_kind = 'message'),
    count(*) filter (where is_active and document_kind = 'thread_context'),
    coalesce(max(payload_hash), '')
from search_documents
"""
MART_DIGEST_SQL = """
select count(*), coalesce(cast(bit_xor(md5_number(cast(mart as varchar))) as varchar), '0')
from {mart} as mart
"""


@dataclass(frozen=True)
class Generation:
    """The embedding generation an artifact is built for, with its full stored identity.

    `in_state` is False for a generation the settings pin but the embed flow has not
    recorded yet (a workspace built before any embedding): it has no vectors to copy.
    """

    generation_id: str
    identity: dict[str, Any]
    in_state: bool = True

    @property
    def stored_dimension(self) -> int:
        """Length of every stored vector of this generation."""
        return int(self.identity["stored_dimension"])


def require_marts(conn: duckdb.DuckDBPyConnection, marts: Iterable[str]) -> None:
    """Fail clearly when the projection has not built these marts in this state database,
    its last run did not succeed (a failed dbt test leaves the tables dbt wrote), ran models
    whose data tests never passed here (`--skip-tests`), the models changed since, or a dbt
    run it did not start wrote the state since (either way untested rows)."""
    last = latest_projection(conn)
    if last is not None and last[1] != "succeeded":
        _, outcome, failure = last
        what = "did not finish" if outcome == "running" else f"failed ({failure})"
        raise SlackqueryError(
            f"the last `slackquery project` {what}: fix the cause and run it again first"
        )
    if last is not None and last[0] != project_fingerprint():
        raise SlackqueryError(
            "the dbt models changed since the last `slackquery project` (a state dbt built "
            "directly is untested): run `slackquery project` first"
        )
    if last is not None and not tests_passed(conn, last[0]):
        raise SlackqueryError(
            "the models were projected without their data tests (`slackquery project "
            "--skip-tests`), and the last projection of these models that ran them did not "
            "pass (or none did): run `slackquery project` first"
        )
    outside = unrecorded_dbt_run(conn)
    if outside is not None:
        raise SlackqueryError(
            f"{outside} wrote the state since the last `slackquery project`: its rows are "
            "untested and may be a trial's; run `slackquery project`, which rebuilds them "
            "from canonical, first"
        )
    present = {
        name
        for (name,) in conn.execute(
            "select table_name from duckdb_tables() where schema_name = 'main' "
            "union all select view_name from duckdb_views() where schema_name = 'main'"
        ).fetchall()
    }
    missing = [mart for mart in marts if mart not in present]
    if missing:
        raise SlackqueryError(
            f"the state database has no {', '.join(missing)}: run `slackquery project` first"
        )


def source_watermark(conn: duckdb.DuckDBPyConnection, marts: Sequence[str]) -> str:
    """sha256 over the document counts, the newest payload hash and the row digest of each
    of `marts` (those an artifact copies): it changes whenever an artifact's content would."""
    require_marts(conn, ["search_documents", *marts])
    values = conn.execute(DOCUMENT_COUNTS_SQL).fetchone()
    assert values is not None
    for mart in marts:
        digest = conn.execute(MART_DIGEST_SQL.format(mart=mart)).fetchone()
        assert digest is not None
        values += (mart, *digest)
    payload = json.dumps([str(value) for value in values], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _has_embedding_tables(conn: duckdb.DuckDBPyConnection) -> bool:
    row = conn.execute(
        "select count(*) from duckdb_tables() where table_name in "
        "('embedding_generations', 'embedding_work_items')"
    ).fetchone()
    return bool(row and row[0] == 2)


def _unembedded(pinned: GenerationIdentity | None, settings: Settings) -> Generation | None:
    """The pinned generation with no vectors, when the settings allow a build without any."""
    if pinned is None or settings.artifact_min_vector_coverage > 0:
        return None
    identity = json.loads(json.dumps(pinned.to_dict()))  # as the embed flow would store it
    return Generation(generation_id=pinned.generation_id, identity=identity, in_state=False)


def current_generation(settings: Settings, conn: duckdb.DuckDBPyConnection) -> Generation:
    """The configured embedding generation, as recorded by the embed flow in state.

    The settings pin the identity when they can (`configured_identity`, no endpoint
    contacted); an unpinned HTTP model is only known through what the embed flow stored,
    so then the newest generation recorded for the configured model is used. With
    `artifact_min_vector_coverage` 0, a pinned generation the embed flow has not recorded
    yet is used as it is (no vectors); an unpinned one still needs `embed`, since only
    the endpoint knows its dimension.
    """
    pinned: GenerationIdentity | None = configured_identity(settings)
    if not _has_embedding_tables(conn):
        unembedded = _unembedded(pinned, settings)
        if unembedded is not None:
            return unembedded
        raise SlackqueryError("the state database has no embeddings: run `slackquery embed` first")
    if pinned is not None:
        row = conn.execute(
            "select generation_id, identity_json from embedding_generations "
            "where generation_id = ?",
            [pinned.generation_id],
        ).fetchone()
        if row is None:
            unembedded = _unembedded(pinned, settings)
            if unembedded is not None:
                return unembedded
            raise SlackqueryError(
                f"embedding generation {pinned.generation_id} has no vectors yet: "
                "run `slackquery embed` first"
            )
    else:
        row = conn.execute(
            "select generation_id, identity_json from embedding_generations "
            "where json_extract_string(identity_json, '$.model') = ? "
            "order by created_at desc limit 1",
            [settings.embedding_model],
        ).fetchone()
        if row is None:
            raise SlackqueryError(
                f"no embedding generation of model {settings.embedding_model!r} in state: "
                "run `slackquery embed` first"
            )
    identity = json.loads(row[1])
    identity.setdefault("generation_id", row[0])
    if "stored_dimension" not in identity:
        raise SlackqueryError(f"generation {row[0]} has no stored_dimension in its identity")
    return Generation(generation_id=row[0], identity=identity)


# Each active document by kind and coverage: `not_embedded` (not wanted: thread context),
# else the state of its current work item (`succeeded` when it has its current vector),
# `stale_text` (items only at older texts) or `not_queued`.
COVERAGE_SQL = f"""
with active as (
    select document_id, document_kind from search_documents where is_active
),
wanted as ({WANTED_DOCUMENTS}),
current_items as (select document_id, state from ({CURRENT_ITEMS}) as items),
queued as (
    select distinct document_id from embedding_work_items
    where generation_id = $generation_id
),
classified as (
    select
        active.document_kind,
        case
            when wanted.document_id is null then 'not_embedded'
            when current_items.state is not null then current_items.state
            when queued.document_id is not null then 'stale_text'
            else 'not_queued'
        end as coverage
    from active
    left join wanted on active.document_id = wanted.document_id
    left join current_items on active.document_id = current_items.document_id
    left join queued on active.document_id = queued.document_id
)
select document_kind, coverage, count(*) from classified group by 1, 2 order by 1, 2
"""


# The same classification for a generation the embed flow has not recorded (its tables
# may not exist yet): no document is queued.
UNQUEUED_SQL = f"""
with wanted as ({WANTED_DOCUMENTS})
select
    documents.document_kind,
    case when wanted.document_id is null then 'not_embedded' else 'not_queued' end,
    count(*)
from search_documents as documents
left join wanted on documents.document_id = wanted.document_id
where documents.is_active
group by 1, 2
order by 1, 2
"""


def coverage_by_kind(
    conn: duckdb.DuckDBPyConnection, generation: Generation
) -> dict[str, dict[str, int]]:
    """Active documents by kind, then by coverage (see `COVERAGE_SQL`)."""
    if generation.in_state:
        rows = conn.execute(COVERAGE_SQL, {"generation_id": generation.generation_id}).fetchall()
    else:
        rows = conn.execute(UNQUEUED_SQL).fetchall()
    by_kind: dict[str, dict[str, int]] = {}
    for kind, coverage, count in rows:
        by_kind.setdefault(kind, {})[coverage] = int(count)
    return by_kind


def check_coverage(
    conn: duckdb.DuckDBPyConnection,
    generation: Generation,
    min_share: float = 1.0,
    max_rejected_share: float = 0.0,
) -> dict[str, dict[str, int]]:
    """Refuse unless at least `min_share` of the active messages have a succeeded vector
    at their current text (1.0: every one), counting as covered the messages the endpoint
    rejected for good (terminal_failed) while they are at most `max_rejected_share` of them.

    Returns the counts by kind and coverage; the error names the missing ones by state
    (pending, in_progress, retryable_failed, terminal_failed, stale_text, not_queued).
    """
    by_kind = coverage_by_kind(conn, generation)
    active = sum(sum(states.values()) for states in by_kind.values())
    if active == 0:
        raise SlackqueryError("no active search documents in state: nothing to build")
    messages = by_kind.get("message", {})
    total = sum(messages.values())
    embedded = messages.get("succeeded", 0)
    rejected = messages.get("terminal_failed", 0)
    excused = rejected if rejected <= max_rejected_share * total else 0
    if embedded + excused >= min_share * total:
        return by_kind
    missing = {state: count for state, count in messages.items() if state != "succeeded"}
    detail = ", ".join(f"{state}: {count}" for state, count in sorted(missing.items()))
    kinds = ", ".join(
        f"{kind}: {sum(states.values())} active" for kind, states in sorted(by_kind.items())
    )
    needed = (
        f"; SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE={min_share} needs {min_share:.1%}"
        if min_share < 1
        else ""
    )
    if rejected and not excused:
        needed += (
            f"; SLACKQUERY_ARTIFACT_MAX_REJECTED_SHARE={max_rejected_share} lets "
            f"{math.floor(max_rejected_share * total)} rejected ones through"
        )
    # terminal_failed items are never claimed again unless asked for.
    embed = "embed --retry-failed" if missing.get("terminal_failed") else "embed"
    raise SlackqueryError(
        f"embedding coverage incomplete for generation {generation.generation_id}: "
        f"{embedded}/{total} active message documents have a vector "
        f"for their current text; missing by state: {detail} ({kinds}){needed}; "
        f"run `slackquery {embed}` and build again"
    )
