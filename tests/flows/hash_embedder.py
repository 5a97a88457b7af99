"""A tiny deterministic embedder for the Dask tests, importable by worker processes.

Vectors come from the text's sha256 (no model to load), so a test can check the stored
vectors byte for byte. Each worker process loads it once (`load`), leaving a marker file per
process when HASH_EMBEDDER_MARKERS names a folder; HASH_EMBEDDER_KILL_AT=N makes the first
worker to reach its N-th batch SIGKILL itself, once across all workers (an O_EXCL marker).
"""

import hashlib
import os
import signal
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

from slackquery.embedding.base import GenerationIdentity, finalize_vectors

MARKERS_ENV = "HASH_EMBEDDER_MARKERS"
KILL_AT_ENV = "HASH_EMBEDDER_KILL_AT"
IDENTITY = GenerationIdentity(
    model="test/sha256-vectors",
    model_revision="1",
    native_dimension=8,
    query_prefix="",
    document_prefix="",
    text_recipe_version="message-v2",
)


def vector_of(text: str) -> np.ndarray:
    """The vector `text` gets (before normalisation)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return np.frombuffer(digest, dtype=np.uint8)[:8].astype(np.float32) + 1.0


class HashEmbedder:
    """Implements the Embedder protocol; pickles to this process's copy."""

    identity = IDENTITY

    def __init__(self) -> None:
        self.batches = 0

    def __reduce__(self) -> tuple:
        return load, ()

    def embed_document_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[int, str]]:
        self.batches += 1
        self._maybe_die()
        return finalize_vectors(np.stack([vector_of(t) for t in texts]), IDENTITY)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_document_batch(texts)[0]

    embed_queries = embed_documents

    def _maybe_die(self) -> None:
        kill_at, markers = os.environ.get(KILL_AT_ENV), os.environ.get(MARKERS_ENV)
        if not kill_at or not markers or self.batches != int(kill_at):
            return
        try:
            os.close(os.open(Path(markers) / "killed", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


@cache
def load() -> HashEmbedder:
    """This process's embedder, created once (a marker file records each load, holding
    the Prefect API the process's environment names)."""
    markers = os.environ.get(MARKERS_ENV)
    if markers:
        (Path(markers) / f"load-{os.getpid()}").write_text(os.environ.get("PREFECT_API_URL", ""))
    return HashEmbedder()
