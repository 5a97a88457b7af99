"""Seeded random document vectors, recorded through the embedding state API instead of a model.

Retrieval cost does not depend on vector values, and embedding 100k+ documents with the
real model takes far longer than a benchmark should. `seed_vectors` registers the
configured generation and enqueues every active message document through the embedding
state API, as `embed_pending` does, then fills all pending items in one set-based update
with a unit vector drawn from a hash of (document id, component, seed) instead of calling
the model. The resulting work items are `succeeded` rows of the configured generation, so
`build_artifact` reads them exactly as it reads real ones.
"""

from datetime import UTC, datetime
from typing import Any

from slackquery.embedding import configured_identity, state
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

SEED_SQL = """
update embedding_work_items as items
set state = 'succeeded', embedding = seeded.embedding, attempt_count = 1,
    embedded_at = $now, updated_at = $now
from (
    select document_id, text_hash,
        list_transform(raw, x -> x / sqrt(list_dot_product(raw, raw)))::float[] as embedding
    from (
        select document_id, text_hash,
            list_transform(
                range($dimension),
                k -> (hash(document_id, k, $seed) % 2000001)::double / 1000000.0 - 1.0
            ) as raw
        from embedding_work_items
        where generation_id = $generation_id and state = 'pending'
    )
) as seeded
where items.generation_id = $generation_id
    and items.document_id = seeded.document_id
    and items.text_hash = seeded.text_hash
"""


def seed_vectors(settings: Settings, *, seed: int = 3) -> dict[str, Any]:
    """Give every active message document without a vector a seeded random unit vector.

    The same state and seed give the same vectors. Returns the generation id, how many
    vectors were recorded, and the coverage.
    """
    identity = configured_identity(settings)
    if identity is None:
        raise SlackqueryError(
            "seeded vectors need a generation identity the settings pin "
            "(the packaged model, or SLACKQUERY_EMBEDDING_MODEL_REVISION)"
        )
    generation_id = identity.generation_id
    connection = state.connect(settings.state_path)
    try:
        state.require_documents(connection, settings.state_path)
        now = datetime.now(UTC)
        with state.transaction(connection):
            state.ensure_schema(connection)
            state.register_generation(connection, identity, now)
            state.enqueue(connection, generation_id, now)
            row = connection.execute(
                SEED_SQL,
                {
                    "now": now,
                    "dimension": identity.stored_dimension,
                    "seed": seed,
                    "generation_id": generation_id,
                },
            ).fetchone()
        return {
            "generation_id": generation_id,
            "recorded": int(row[0]) if row else 0,
            **state.coverage(connection, generation_id),
        }
    finally:
        connection.close()
