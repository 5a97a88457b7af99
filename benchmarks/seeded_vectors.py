"""Seeded random document vectors, recorded through the embedding state API instead of a model.

Retrieval cost does not depend on vector values, and embedding 100k+ documents with the
real model takes far longer than a benchmark should. `seed_vectors` registers the
configured generation and enqueues every active message document through the embedding
state API, as `embed_pending` does, then claims and records them in large batches as the
embed flow does, with a unit vector drawn by NumPy from a generator seeded with (seed,
document id) instead of calling the model. The resulting work items are `succeeded` rows
of the configured generation, so `build_artifact` reads them exactly as it reads real ones.
"""

import hashlib
from datetime import UTC, datetime
from typing import Any

import numpy as np

from slackquery.embedding import configured_identity, state
from slackquery.embedding.work import CHECKPOINT_THRESHOLD
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

# Work items claimed and recorded per transaction (20,000 x 768 float32 is 61 MB).
BATCH = 20_000


def seeded_vector(document_id: str, seed: int, dimension: int) -> np.ndarray:
    """The unit vector of `document_id` under `seed`: the same in every run and batch."""
    key = int.from_bytes(hashlib.blake2b(document_id.encode("utf-8"), digest_size=8).digest())
    vector = np.random.default_rng([seed, key]).standard_normal(dimension, dtype=np.float32)
    return vector / np.linalg.norm(vector)


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
        # As in an embed run: DuckDB's default 16 MB would checkpoint after every batch.
        connection.execute(f"set checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        state.require_documents(connection, settings.state_path)
        now = datetime.now(UTC)
        with state.transaction(connection):
            state.ensure_schema(connection)
            state.register_generation(connection, identity, now)
            state.enqueue(connection, generation_id, now)
        recorded = 0
        while True:
            claim = state.claim_batch(
                connection, generation_id, limit=BATCH, lease_s=settings.embedding_lease_s, now=now
            )
            if not claim.items:
                break
            vectors = np.stack(
                [
                    seeded_vector(item.document_id, seed, identity.stored_dimension)
                    for item in claim.items
                ]
            )
            recorded += state.record_successes(
                connection, generation_id, claim.lease_id, claim.items, vectors, now
            )
        return {
            "generation_id": generation_id,
            "recorded": recorded,
            **state.coverage(connection, generation_id),
        }
    finally:
        connection.close()
