"""Seeded random document vectors, recorded through the embedding state API instead of a model.

Retrieval cost does not depend on vector values, and embedding 100k+ documents with the
real model takes far longer than a benchmark should. `seed_vectors` registers the
configured generation and enqueues every active message document through the embedding
state API, then claims and records them in large batches through an `EmbedRun`, as the
embed flow does, with a unit vector drawn by NumPy from a generator seeded with (seed,
document id) instead of calling the model. The resulting work items are `succeeded` rows
of the configured generation, so `build_artifact` reads them exactly as it reads real ones.
"""

import hashlib
from typing import Any

import numpy as np

from slackquery.embedding import configured_identity, state
from slackquery.embedding.work import BatchOutcome, EmbedRun
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
    if configured_identity(settings) is None:
        raise SlackqueryError(
            "seeded vectors need a generation identity the settings pin "
            "(the packaged model, or SLACKQUERY_EMBEDDING_MODEL_REVISION)"
        )
    # An embed run whose model is never called (a packaged model loads on first use).
    run = EmbedRun(settings)
    try:
        run.prepare()
        dimension = run.identity.stored_dimension
        while (claim := run.claim(BATCH)).items:
            vectors = [seeded_vector(item.document_id, seed, dimension) for item in claim.items]
            run.record(claim, BatchOutcome(vectors=np.stack(vectors)))
        return {
            "generation_id": run.generation_id,
            "recorded": run.tally["succeeded"],
            **state.coverage(run.connection, run.generation_id),
        }
    finally:
        run.close()
