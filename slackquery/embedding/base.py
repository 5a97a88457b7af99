"""The embedder contract: a pinned generation identity plus document and query embedding.

Vectors are only comparable within one generation. The identity covers everything that
changes a vector (model, revision, dimensions, prefixes, normalisation, text recipe) and
nothing that does not (the transport: in-process or HTTP).
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from slackquery.errors import SlackqueryError

MAX_STORED_DIMENSION = 768

# Version of the recipe that renders `search_documents.text_embedding` (`#channel author: text`,
# a reply followed by the start of its root; owned by the dbt projection's
# `document_embedding_text` macro). Changing the recipe must change this, so old vectors stop
# being comparable rather than silently mixing with new ones. v2: replies carry their root.
TEXT_RECIPE_VERSION = "message-v2"


@dataclass(frozen=True)
class GenerationIdentity:
    """What makes two vectors comparable. Stored in state and copied into every artifact."""

    model: str
    model_revision: str
    native_dimension: int
    query_prefix: str
    document_prefix: str
    text_recipe_version: str
    normalized: bool = True
    distance: str = "cosine"

    @property
    def stored_dimension(self) -> int:
        """Native dimension up to 768; larger models keep their first 768 (then re-normalise)."""
        return min(self.native_dimension, MAX_STORED_DIMENSION)

    @property
    def config_hash(self) -> str:
        """sha256 over the identity fields, stable across processes and transports."""
        payload = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def generation_id(self) -> str:
        """Readable, stable id: model, revision, stored dimension, recipe, config hash prefix."""
        return (
            f"{self.model}@{self.model_revision}:d{self.stored_dimension}"
            f":{self.text_recipe_version}:{self.config_hash[:12]}"
        )

    def to_dict(self) -> dict[str, object]:
        """The full identity, derived fields included, as stored in state and artifacts."""
        return {
            **asdict(self),
            "stored_dimension": self.stored_dimension,
            "config_hash": self.config_hash,
            "generation_id": self.generation_id,
        }


class Embedder(Protocol):
    """Turns texts into float32 (n, stored_dimension) L2-normalised vectors."""

    identity: GenerationIdentity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed document texts (the generation's document prefix applied)."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed search queries (the generation's query prefix applied)."""
        ...

    def embed_document_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[int, str]]:
        """Document vectors plus `{row: reason}` for rows that are invalid (zeros in the array).

        Transport failures raise `TransientEmbeddingError` or `RequestRejectedError`
        (`slackquery.embedding.errors`); invalid vectors are reported per row, so one bad
        document does not fail its batch.
        """
        ...


class GenerationMismatchError(SlackqueryError):
    """A query embedder's generation differs from the one the vectors were built with."""


def ensure_same_generation(identity: GenerationIdentity, expected_generation_id: str) -> None:
    """Refuse to compare vectors across generations (different model, recipe or dims).

    Serving calls this with the artifact's `generation_id` before embedding a query: cosine
    between two generations' vectors is meaningless, and silently returning bad rankings is
    worse than an error.
    """
    if identity.generation_id != expected_generation_id:
        raise GenerationMismatchError(
            f"embedding generation mismatch: the artifact was built with "
            f"{expected_generation_id!r} but the configured embedder is "
            f"{identity.generation_id!r}; re-embed and rebuild, or configure the same model "
            f"(SLACKQUERY_EMBEDDING_MODEL / _MODEL_REVISION / _DIMENSION / prefixes)"
        )


def finalize_vectors(
    raw: np.ndarray | Sequence[object], identity: GenerationIdentity
) -> tuple[np.ndarray, dict[int, str]]:
    """Validate native vectors and turn them into stored ones.

    Returns float32 `(n, stored_dimension)` L2-normalised vectors plus `{row: reason}` for
    rows that are unusable (not a list of numbers, wrong dimension, non-finite, a norm that
    overflows or is zero); their rows in the array are zeros and must not be stored.
    Validation happens here, once, for every transport, because a remote endpoint can
    return anything: a row of strings, booleans, objects or nested lists is reported, never
    converted and never raised.
    """
    rows = list(raw) if not isinstance(raw, np.ndarray) else raw
    count = len(rows)
    stored = np.zeros((count, identity.stored_dimension), dtype=np.float32)
    invalid: dict[int, str] = {}
    for index in range(count):
        vector, problem = _as_vector(rows[index])
        if vector is None:
            invalid[index] = problem
            continue
        if vector.shape[0] != identity.native_dimension:
            invalid[index] = f"wrong dimension {vector.shape}: expected {identity.native_dimension}"
            continue
        if not np.all(np.isfinite(vector)):
            invalid[index] = "vector has non-finite values"
            continue
        kept = vector[: identity.stored_dimension]
        with np.errstate(over="ignore", under="ignore"):
            norm = float(np.linalg.norm(kept))
        if not np.isfinite(norm):
            largest = float(np.max(np.abs(kept)))
            invalid[index] = f"vector norm overflows (largest absolute value {largest:.3g})"
            continue
        if norm == 0.0:
            invalid[index] = "vector has zero norm"
            continue
        stored[index] = (kept / norm).astype(np.float32)
    return stored, invalid


# The element types a vector may hold: JSON numbers as Python parses them, numpy scalars.
# bool is an int subclass, and numpy would read True as 1.0, so it is refused by name.
_NUMBER_TYPES = (int, float, np.integer, np.floating)
_NOT_NUMBERS = (bool, np.bool_)


def _as_vector(row: object) -> tuple[np.ndarray | None, str]:
    """`row` as a float64 vector, or None and why it is not a flat list of numbers."""
    if isinstance(row, np.ndarray):
        if row.ndim != 1:
            return None, f"wrong dimension {row.shape}: expected a flat vector"
        if row.dtype.kind not in "iuf":
            return None, f"vector is not numeric (dtype {row.dtype})"
        return row.astype(np.float64, copy=False), ""
    if row is None:
        return None, "vector is missing (null)"
    if not isinstance(row, list | tuple):
        return None, f"vector is a {type(row).__name__}, not a list of numbers"
    # One pass in C over the element types (a batch holds ~400,000 numbers).
    kinds = set(map(type, row))
    odd = sorted(
        kind.__name__
        for kind in kinds
        if not issubclass(kind, _NUMBER_TYPES) or issubclass(kind, _NOT_NUMBERS)
    )
    if odd:
        return None, f"vector holds {', '.join(odd)} values, not only numbers"
    try:
        return np.asarray(row, dtype=np.float64), ""
    except OverflowError:  # an integer beyond float64's range
        return None, "vector has values beyond the float64 range"
