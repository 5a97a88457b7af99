"""Generation identity, stored-dimension rules and embedder configuration."""

import warnings

import numpy as np
import pytest

from slackquery.embedding import (
    GenerationMismatchError,
    build_embedder,
    configured_identity,
    ensure_same_generation,
    finalize_vectors,
)
from slackquery.embedding.base import TEXT_RECIPE_VERSION, GenerationIdentity
from slackquery.embedding.packaged import packaged_revision, weights_sha256
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings


def _identity(native: int = 768) -> GenerationIdentity:
    return GenerationIdentity(
        model="nomic-embed-text:v1.5",
        model_revision="sha256.0123456789abcdef",
        native_dimension=native,
        query_prefix="search_query: ",
        document_prefix="search_document: ",
        text_recipe_version="message-v1",
    )


def test_default_identity_pins_package_version_and_weights_digest(settings: Settings) -> None:
    identity = build_embedder(settings).identity
    import onnxruntime

    assert identity.model == "ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2"
    assert identity.model_revision == (
        f"0.3.0+ort{onnxruntime.__version__}+int8exact+sha256.{weights_sha256(identity.model)[:16]}"
    )
    assert (identity.native_dimension, identity.stored_dimension) == (768, 768)
    assert (identity.query_prefix, identity.document_prefix) == ("query: ", "passage: ")
    assert identity.to_dict()["generation_id"] == identity.generation_id
    revision = packaged_revision(identity.model)
    assert identity.generation_id.startswith(
        f"ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2@{revision}:d768:{TEXT_RECIPE_VERSION}:"
    )
    e5_alone = weights_sha256("ort-int8/multilingual-e5-small-q4")
    assert weights_sha256(identity.model) != e5_alone  # the companion's weights count too
    assert configured_identity(settings) == identity


def test_identity_excludes_transport_and_changes_with_recipe() -> None:
    base = _identity()
    assert base.config_hash == _identity().config_hash  # stable across instances
    changed = GenerationIdentity(**{**base.__dict__, "text_recipe_version": "message-v2"})
    assert changed.generation_id != base.generation_id
    assert "transport" not in base.to_dict()


def test_large_models_keep_first_768_dimensions_renormalised() -> None:
    identity = _identity(1024)
    assert identity.stored_dimension == 768
    raw = np.arange(1, 1025, dtype=np.float32).reshape(1, 1024)
    stored, invalid = finalize_vectors(raw, identity)
    assert invalid == {}
    assert stored.shape == (1, 768)
    expected = raw[0, :768] / np.linalg.norm(raw[0, :768])
    np.testing.assert_allclose(stored[0], expected, rtol=1e-6)
    assert abs(float(np.linalg.norm(stored[0])) - 1.0) < 1e-6


def test_invalid_vectors_are_reported_per_row() -> None:
    identity = _identity(4)
    rows = [[1, 0, 0, 0], [float("nan"), 1, 0, 0], [0, 0, 0, 0], [1, 2, 3], [0, 3, 4, 0]]
    stored, invalid = finalize_vectors(rows, identity)
    assert sorted(invalid) == [1, 2, 3]
    assert "non-finite" in invalid[1] and "zero" in invalid[2] and "dimension" in invalid[3]
    np.testing.assert_allclose(stored[4], [0, 0.6, 0.8, 0])
    assert not stored[1].any()


def test_rows_that_are_not_lists_of_numbers_are_invalid_not_raised() -> None:
    identity = _identity(2)
    rows = [["a", "b"], ["1.5", "2"], [[1.0], [2.0, 3.0]], [{"x": 1}, 1.0], [True, False]]
    rows += [[1.0, None], None, 7, [10**400, 1], np.array(["a", "b"]), [1, 2]]
    stored, invalid = finalize_vectors(rows, identity)
    assert sorted(invalid) == list(range(10))
    assert "str values" in invalid[0] and "str values" in invalid[1]  # "1.5" is not 1.5
    assert "list values" in invalid[2] and "dict values" in invalid[3]
    assert "bool values" in invalid[4] and "NoneType values" in invalid[5]
    assert "missing" in invalid[6] and "is a int" in invalid[7]
    assert "float64 range" in invalid[8] and "not numeric" in invalid[9]
    np.testing.assert_allclose(stored[10], np.array([1, 2]) / np.sqrt(5), rtol=1e-6)
    assert not stored[:10].any()


def test_an_overflowing_norm_is_reported_as_such_without_a_warning() -> None:
    identity = _identity(4)
    rows = [[1e308] * 4, [1e-320] * 4, [3e150, 4e150, 0, 0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        stored, invalid = finalize_vectors(rows, identity)
    assert invalid == {
        0: "vector norm overflows (largest absolute value 1e+308)",
        1: "vector has zero norm",  # its square underflows; as unusable as zeros
    }
    np.testing.assert_allclose(stored[2], [0.6, 0.8, 0, 0], rtol=1e-6)


def test_mismatched_generation_is_refused_clearly(settings: Settings) -> None:
    identity = build_embedder(settings).identity
    ensure_same_generation(identity, identity.generation_id)
    with pytest.raises(GenerationMismatchError, match="generation mismatch") as caught:
        ensure_same_generation(identity, _identity().generation_id)
    assert isinstance(caught.value, SlackqueryError)


def test_build_embedder_is_cached_and_queries_are_normalised(settings: Settings) -> None:
    embedder = build_embedder(settings)
    assert build_embedder(settings.model_copy()) is embedder
    vectors = embedder.embed_queries(["deploy failed", "lunch"])
    assert vectors.shape == (2, 768) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_bad_configurations_fail_with_the_setting_named(settings: Settings) -> None:
    with pytest.raises(SlackqueryError, match="EMBEDDING_QUERY_PREFIX"):
        build_embedder(settings.model_copy(update={"embedding_query_prefix": "search_query: "}))
    with pytest.raises(SlackqueryError, match="EMBEDDING_DIMENSION is required"):
        build_embedder(
            settings.model_copy(
                update={"embedding_model": "nomic-embed-text", "embedding_transport": "ollama"}
            )
        )
    with pytest.raises(SlackqueryError, match="cannot run in-process"):
        build_embedder(
            settings.model_copy(
                update={"embedding_model": "nomic-embed-text", "embedding_dimension": 768}
            )
        )
    with pytest.raises(SlackqueryError, match="MODEL_REVISION"):
        build_embedder(settings.model_copy(update={"embedding_model_revision": "0.2.0"}))
