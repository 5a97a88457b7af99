"""Exact cosine ranking over the artifact's vectors, and the query-embedding step.

Document vectors are stored L2-normalised, so cosine is a dot product: one float32 matrix
per artifact, multiplied by the query vector (numpy: ~8 ms at 100k x 384, far below
DuckDB's `array_cosine_similarity` scan). Query vectors only compare with document vectors
of the same embedding generation, so the embedder's identity is checked against the
artifact's before any query is embedded.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from slackquery.embedding.base import Embedder, ensure_same_generation
from slackquery.errors import SlackqueryError

# Below this share of eligible rows, multiplying only those rows beats the full product.
_SUBSET_SHARE = 0.25


def cosine_scores(matrix: np.ndarray, query: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Cosine of every eligible row with `query`; ineligible rows get -inf."""
    scores = np.full(matrix.shape[0], -np.inf, dtype=np.float32)
    rows = np.flatnonzero(eligible)
    if rows.size == 0:
        return scores
    # einsum runs single-threaded SIMD: on a busy 2-core host, BLAS's thread pool
    # oversubscribes and makes one matrix-vector product several times slower.
    if rows.size < _SUBSET_SHARE * matrix.shape[0]:
        scores[rows] = np.einsum("ij,j->i", matrix[rows], query)
    else:
        scores = np.einsum("ij,j->i", matrix, query)
        scores[~eligible] = -np.inf
    return scores


class QueryEmbedder:
    """Embeds query text once per distinct text (small LRU) and enforces the generation."""

    def __init__(self, factory: Callable[[], Embedder], cache_size: int = 1024):
        self._factory = factory
        self._embedder: Embedder | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        """The configured embedder, created on first use (loading a model takes time)."""
        with self._lock:
            if self._embedder is None:
                self._embedder = self._factory()
            return self._embedder

    def embed(self, text: str, generation_id: str, dimension: int) -> np.ndarray:
        """The normalised float32 query vector, after checking the embedder's generation."""
        embedder = self.embedder
        ensure_same_generation(embedder.identity, generation_id)
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached
        vector = np.asarray(embedder.embed_queries([text]), dtype=np.float32).reshape(-1)
        if vector.shape[0] != dimension:
            raise SlackqueryError(
                f"query vector has {vector.shape[0]} dimensions, artifact vectors have {dimension}"
            )
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(norm) or norm == 0.0:
            raise SlackqueryError("the embedder returned an empty or invalid query vector")
        vector = vector / norm
        with self._lock:
            self._cache[text] = vector
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector
