"""The HTTP embedder against a scriptable endpoint: it pickles for Dask workers, and a
malformed vector or model listing is reported in one line, never raised as a traceback."""

import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import duckdb
import numpy as np
import pytest

from slackquery import embedding
from slackquery.embedding import build_embedder
from slackquery.embedding.errors import EndpointValidationError, RequestRejectedError
from slackquery.embedding.http import HttpEmbedder
from slackquery.embedding.work import embed_pending
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts
from tests.embedding.endpoint import DIMENSION, MODEL, Endpoint, hash_vector
from tests.loopback import serve


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Endpoint, str]]:
    fake = Endpoint()
    with serve(fake.app) as url:
        yield fake, url


@pytest.fixture
def endpoint(
    server: tuple[Endpoint, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Endpoint, str]]:
    """The endpoint reset to a good one, and an empty embedder cache: each test validates."""
    fake, url = server
    fake.reset()
    cache: dict[object, Any] = {}
    monkeypatch.setattr(embedding, "_cache", cache)
    yield fake, url
    for built in cache.values():
        built.close()


def _config(settings: Settings, url: str, protocol: str = "ollama") -> Settings:
    return settings.model_copy(
        update={
            "embedding_transport": protocol,
            "embedding_url": url,
            "embedding_model": MODEL,
            "embedding_dimension": DIMENSION,
            "embedding_document_prefix": "doc: ",
            "embedding_timeout_s": 5.0,
        }
    )


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_a_pickled_embedder_builds_its_own_client_and_embeds_the_same_vectors(
    settings: Settings, endpoint: tuple[Endpoint, str], protocol: str
) -> None:
    fake, url = endpoint
    embedder = build_embedder(_config(settings, url, protocol))
    texts = message_texts(5)
    expected = embedder.embed_documents(texts)
    listing = "/api/tags" if protocol == "ollama" else "/v1/models"
    assert fake.paths.count(listing) == 1

    copy = pickle.loads(pickle.dumps(embedder))  # what Dask does with each batch's embedder
    assert isinstance(copy, HttpEmbedder) and copy is not embedder
    assert copy._client is not embedder._client and copy._lock is not embedder._lock
    assert pickle.loads(pickle.dumps(embedder)) is copy  # one copy per process, not per batch
    np.testing.assert_array_equal(copy.embed_documents(texts), expected)
    assert copy.identity == embedder.identity
    assert fake.paths.count(listing) == 2  # the copy validated the endpoint it reaches itself
    embedder.close()  # the copy's client is its own
    np.testing.assert_array_equal(copy.embed_documents(texts[:1]), expected[:1])
    copy.close()


MALFORMED = {
    "strings": (["a"] * DIMENSION, "holds str values"),
    "numeric strings": (["0.5"] * DIMENSION, "holds str values"),  # not parsed
    "ragged": ([[0.1, 0.2], [0.3]], "holds list values"),
    "objects": ([{"x": 1}] * DIMENSION, "holds dict values"),
    "booleans": ([True] * DIMENSION, "holds bool values"),
    "one boolean": ([0.5, False] + [0.5] * (DIMENSION - 2), "holds bool values"),
    "one null": ([0.5, None] + [0.5] * (DIMENSION - 2), "holds NoneType values"),
    "null": (None, "missing (null)"),
    "a string": ("0.5", "is a str, not a list of numbers"),
    "an object": ({"v": [0.5] * DIMENSION}, "is a dict, not a list of numbers"),
    "huge integers": ([10**400] * DIMENSION, "beyond the float64 range"),
    "huge floats": ([1e308] * DIMENSION, "norm overflows"),
    "NaN": ([float("nan")] * DIMENSION, "non-finite"),
    "zeros": ([0.0] * DIMENSION, "zero norm"),
}
OPENAI_MALFORMED = ("strings", "ragged", "null", "huge floats")


@pytest.mark.parametrize(
    ("protocol", "case"),
    [("ollama", case) for case in MALFORMED] + [("openai", case) for case in OPENAI_MALFORMED],
)
def test_a_malformed_vector_is_an_invalid_row_not_a_traceback(
    settings: Settings,
    endpoint: tuple[Endpoint, str],
    protocol: str,
    case: str,
) -> None:
    fake, url = endpoint
    malformed, reason = MALFORMED[case]
    texts = message_texts(3)
    fake.vector = lambda text: malformed if text.endswith(texts[1]) else hash_vector(text)
    embedder = build_embedder(_config(settings, url, protocol))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "overflow encountered"
        vectors, invalid = embedder.embed_document_batch(texts)
    assert list(invalid) == [1] and reason in invalid[1]
    assert not vectors[1].any() and vectors[0].any() and vectors[2].any()
    with pytest.raises(RequestRejectedError, match="invalid vector") as caught:
        embedder.embed_documents(texts)
    assert caught.value.error_class == "invalid_vector"


def test_a_run_records_malformed_vectors_as_invalid_items(
    settings: Settings, endpoint: tuple[Endpoint, str]
) -> None:
    fake, url = endpoint
    fake.vector = lambda text: ["a"] * DIMENSION if "(item 1)" in text else hash_vector(text)
    config = _config(settings, url)
    create_state_db(config.state_path, message_texts(4))
    result = embed_pending(config, embedder=build_embedder(config))
    assert result["counts"]["succeeded"] == 3
    connection = duckdb.connect(str(config.state_path), read_only=True)
    try:
        failed = connection.execute(
            "select error_class, error_message from embedding_work_items where state <> 'succeeded'"
        ).fetchall()
    finally:
        connection.close()
    assert failed == [("invalid_vector", "vector holds str values, not only numbers")]


def _tags_with(**details: Any) -> dict[str, Any]:
    return {"models": [{"name": MODEL, "details": details}]}


@pytest.mark.parametrize(
    ("protocol", "listing", "message"),
    [
        ("ollama", ["fake"], "GET /api/tags is not a model listing: expected an object"),
        ("ollama", {"models": ["fake"]}, "'models' holds a string ('fake'), expected objects"),
        ("ollama", {"models": {"name": MODEL}}, "got 'models' as an object"),
        (
            "ollama",
            _tags_with(embedding_length="eight"),
            "/api/tags reports embedding_length 'eight'",
        ),
        ("ollama", _tags_with(embedding_length=True), "embedding_length True for model"),
        ("ollama", _tags_with(embedding_length=[8]), "embedding_length [8] for model"),
        ("ollama", _tags_with(embedding_length=DIMENSION, revision=3), "revision 3 for model"),
        ("ollama", {"models": [{"name": MODEL, "details": [8]}]}, "'details' of model"),
        ("ollama", {"models": [{"name": ["x"]}]}, "does not serve model 'fake-embed'"),
        ("openai", [MODEL], "GET /v1/models is not a model listing: expected an object"),
        ("openai", {"data": [MODEL]}, "'data' holds a string ('fake-embed'), expected objects"),
        ("openai", {"data": [{"id": MODEL, "dimensions": "eight"}]}, "reports dimensions 'eight'"),
        ("openai", {"data": [{"id": MODEL, "dimensions": 9}]}, "has dimension 9, expected 8"),
    ],
)
def test_a_malformed_model_listing_is_refused_in_one_line(
    settings: Settings,
    endpoint: tuple[Endpoint, str],
    protocol: str,
    listing: Any,
    message: str,
) -> None:
    fake, url = endpoint
    fake.tags = fake.models = listing
    with pytest.raises(EndpointValidationError) as caught:
        _ = build_embedder(_config(settings, url, protocol)).identity
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert text.startswith(f"embedding endpoint {url} ")


def test_a_dimension_reported_as_digits_is_still_read(
    settings: Settings, endpoint: tuple[Endpoint, str]
) -> None:
    fake, url = endpoint
    fake.tags = _tags_with(embedding_length=str(DIMENSION), revision="r1")
    identity = build_embedder(_config(settings, url)).identity
    assert (identity.native_dimension, identity.model_revision) == (DIMENSION, "r1")
