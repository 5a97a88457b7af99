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

MAX_STORED_DIMENSION = 512


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
        """Native dimension up to 512; larger models keep their first 512 (then re-normalise)."""
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
