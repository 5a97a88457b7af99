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

# Below this share of eligible vectors, scoring only those rows beats the full product
# (measured at 1M x 768: a 12.6% subset 61-77 ms, the full pass 100 ms; even at 20%).
_SUBSET_SHARE = 0.18
# Rows gathered per step of a subset product: 1,024 x 768 float32 is 3 MiB, small enough to
# come from the heap. Gathering the whole subset at once allocates hundreds of MiB per query,
# which the kernel backs with huge pages and, once memory is fragmented, stalls on
# compaction: filtered searches at 1M measured 200-650 ms instead of ~60 ms that way.
_GATHER_ROWS = 1024


def dot_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """`matrix @ query` as float32 (cosine, since both sides are L2-normalised)."""
    # einsum runs single-threaded SIMD: on a busy 2-core host, BLAS's thread pool
    # oversubscribes and makes one matrix-vector product slower (measured: 2-thread sgemv
    # p95 16 ms vs einsum 14 ms at 100k x 384; 1-thread sgemv ties einsum but needs a
    # process-wide BLAS setting).
    return np.einsum("ij,j->i", matrix, query)


def vector_scores(
    matrix: np.ndarray, query: np.ndarray, positions: np.ndarray | None
) -> np.ndarray:
    """Cosine of `query` with the matrix rows at `positions` (None: every row), in order."""
    if positions is None:
        return dot_scores(matrix, query)
    if positions.size == 0:
        return np.zeros(0, dtype=np.float32)
    if positions.size >= _SUBSET_SHARE * matrix.shape[0]:
        return dot_scores(matrix, query)[positions]
    scores = np.empty(positions.size, dtype=np.float32)
    block = np.empty((min(_GATHER_ROWS, positions.size), matrix.shape[1]), dtype=matrix.dtype)
    for start in range(0, positions.size, _GATHER_ROWS):
        chunk = positions[start : start + _GATHER_ROWS]
        rows = block[: chunk.size]
        np.take(matrix, chunk, axis=0, out=rows)
        scores[start : start + chunk.size] = dot_scores(rows, query)
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
