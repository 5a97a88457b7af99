"""The real embed-server: both protocols equal in-process vectors; every bad input refused."""

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from slackquery.embedding import build_embedder
from slackquery.embedding.errors import EndpointValidationError
from slackquery.embedding.server import validate_api_key
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.embedding.conftest import API_KEY, MODEL, http_settings
from tests.embedding.documents import message_texts

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def client(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=30) as http:
        yield http


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_http_vectors_equal_in_process_vectors(
    settings: Settings, server_url: str, protocol: str
) -> None:
    texts = message_texts(6)
    local = build_embedder(settings)
    remote = build_embedder(http_settings(settings, server_url, protocol))
    assert remote.identity == local.identity  # the transport is not part of the identity
    remote_docs, invalid = remote.embed_document_batch(texts)
    assert invalid == {}
    np.testing.assert_array_equal(remote_docs, local.embed_documents(texts))
    np.testing.assert_array_equal(
        remote.embed_queries(["why did the deploy fail"]),
        local.embed_queries(["why did the deploy fail"]),
    )


def test_validation_rejects_wrong_revision_model_key_and_dead_endpoint(
    settings: Settings, server_url: str
) -> None:
    wrong_revision = http_settings(
        settings, server_url, "ollama", embedding_model_revision="0.3.0+sha256.0000000000000000"
    )
    with pytest.raises(EndpointValidationError, match=r"expected '0\.3\.0"):
        _ = build_embedder(wrong_revision).identity
    unknown = http_settings(
        settings, server_url, "openai", embedding_model="other-model", embedding_dimension=384
    )
    with pytest.raises(EndpointValidationError, match="does not serve model 'other-model'"):
        _ = build_embedder(unknown).identity
    bad_key = http_settings(settings, server_url, "ollama", embedding_api_key="x" * 20)
    with pytest.raises(EndpointValidationError, match="HTTP 401"):
        _ = build_embedder(bad_key).identity
    unreachable = http_settings(settings, "http://127.0.0.1:9", "ollama")
    with pytest.raises(EndpointValidationError, match="failed validation"):
        _ = build_embedder(unreachable).identity


@pytest.mark.parametrize("path", ["/health", "/api/tags", "/v1/models"])
def test_every_route_needs_the_key(client: httpx.Client, path: str) -> None:
    assert client.get(path).status_code == 401
    wrong = client.get(path, headers={"Authorization": "Bearer wrong-key-0123456789"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert client.get(path, headers=AUTH).status_code == 200


def test_embed_without_key_is_401(client: httpx.Client) -> None:
    body = {"model": MODEL.name, "input": ["passage: x"]}
    assert client.post("/api/embed", json=body).status_code == 401
    assert client.post("/v1/embeddings", json=body).status_code == 401


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/api/embed", {"model": "nope", "input": ["passage: x"]}, 404, "not found"),
        ("/v1/embeddings", {"model": "nope", "input": ["passage: x"]}, 404, "not found"),
        ("/api/embed", {"model": MODEL.name, "input": ["passage: x"] * 9}, 400, "limit of 8"),
        ("/api/embed", {"model": MODEL.name, "input": ["x"], "truncate": False}, 400, "truncate"),
        ("/api/embed", {"model": MODEL.name, "input": ["passage: x"], "dimensions": 512}, 400,
         "dimensions"),
        ("/api/embed", {"model": MODEL.name, "input": ["passage: x"], "options": {"a": 1}}, 400,
         "options"),
        ("/v1/embeddings", {"model": MODEL.name, "input": ["passage: x"],
                            "encoding_format": "base64"}, 400, "encoding_format"),
        ("/v1/embeddings", {"model": MODEL.name, "input": ["passage: x"], "input_type": "q"},
         400, "unsupported field"),
        ("/api/embed", {"model": MODEL.name, "input": ["no prefix here"]}, 400, "must start"),
        ("/api/embed", {"model": MODEL.name, "input": []}, 400, "empty"),
        ("/api/embed", {"model": MODEL.name, "input": [1, 2]}, 400, "list of strings"),
    ],
)  # fmt: skip
def test_bad_requests_get_clear_4xx(
    client: httpx.Client, path: str, body: dict[str, object], status: int, message: str
) -> None:
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == status
    assert message in response.text


def test_oversized_bodies_are_413_even_when_streamed(client: httpx.Client) -> None:
    big = b'{"model": "%s", "input": ["passage: ' % MODEL.name.encode() + b"x" * 70_000 + b'"]}'
    declared = client.post("/api/embed", content=big, headers=AUTH)
    assert declared.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    streamed = client.post("/api/embed", content=chunks(), headers=AUTH)
    assert streamed.status_code == 413
    assert "over 65536 bytes" in streamed.text


@pytest.mark.parametrize(
    ("key", "message"), [("short", "at least 16"), ("é" * 20, "printable ASCII")]
)
def test_weak_keys_are_refused(key: str, message: str) -> None:
    with pytest.raises(SlackqueryError, match=message):
        validate_api_key(key)
