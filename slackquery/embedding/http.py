"""HTTP transports: the Ollama `/api/embed` protocol and the OpenAI `/v1/embeddings` protocol.

Prefixes are applied here, client-side, exactly as the generation identity says: every
input sent is `prefix + text`. That is what a user's own Ollama (nomic-embed-text wants
`search_document: `), a TEI server or a hosted endpoint expect, and the project's
`embed-server` accepts the same (it maps a leading `query: ` / `passage: ` onto the packaged
engine's two modes), so vectors over HTTP equal in-process vectors bit for bit.

The endpoint is validated once, on first use: the model must be listed (with the expected
dimension and revision when the endpoint reports them) and a probe vector must be finite,
non-zero and of the native dimension. A misconfigured endpoint fails the run before any
work item is claimed.
"""

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import httpx
import numpy as np

from slackquery.embedding.base import GenerationIdentity, finalize_vectors
from slackquery.embedding.errors import (
    EndpointValidationError,
    RequestRejectedError,
    TransientEmbeddingError,
)

Protocol = Literal["ollama", "openai"]
PROBE_TEXT = "slackquery endpoint probe"


class HttpEmbedder:
    """An embedder behind an HTTP endpoint; thread-safe; validates itself on first use.

    `identity_for` builds the generation identity from the revision the endpoint reports
    (None when it reports none), so a pinned or packaged revision is checked against the
    endpoint rather than trusted.
    """

    def __init__(
        self,
        *,
        protocol: Protocol,
        base_url: str,
        model: str,
        native_dimension: int,
        document_prefix: str,
        query_prefix: str,
        expected_revision: str | None,
        identity_for: Callable[[str | None], GenerationIdentity],
        api_key: str | None = None,
        timeout_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.protocol = protocol
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.native_dimension = native_dimension
        self.document_prefix = document_prefix
        self.query_prefix = query_prefix
        self.expected_revision = expected_revision
        self._identity_for = identity_for
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._identity: GenerationIdentity | None = None
        self._lock = threading.Lock()

    # -- public API ------------------------------------------------------------------------
    @property
    def identity(self) -> GenerationIdentity:
        """The generation identity; the first access validates the endpoint."""
        if self._identity is None:
            with self._lock:
                if self._identity is None:
                    self._identity = self._validate()
        return self._identity

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Stored-dimension document vectors; raises on any invalid vector."""
        return self._strict(self.embed_document_batch(texts))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Stored-dimension query vectors; raises on any invalid vector."""
        identity = self.identity
        raw = self._request([identity.query_prefix + text for text in texts])
        return self._strict(finalize_vectors(raw, identity))

    def embed_document_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, dict[int, str]]:
        """Vectors plus `{row: reason}` for invalid rows; the work loop's entry point."""
        identity = self.identity
        raw = self._request([identity.document_prefix + text for text in texts])
        return finalize_vectors(raw, identity)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    # -- internals -------------------------------------------------------------------------
    @staticmethod
    def _strict(result: tuple[np.ndarray, dict[int, str]]) -> np.ndarray:
        vectors, invalid = result
        if invalid:
            first = min(invalid)
            raise RequestRejectedError(
                "invalid_vector", f"endpoint returned an invalid vector: {invalid[first]}", 200
            )
        return vectors

    def _send(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.request(method, path, json=payload)
        except httpx.TimeoutException as error:
            raise TransientEmbeddingError(
                "timeout", f"{self.base_url}{path}: timed out ({type(error).__name__})"
            ) from error
        except httpx.TransportError as error:
            raise TransientEmbeddingError(
                "transport", f"{self.base_url}{path}: {type(error).__name__}: {error}"
            ) from error
        status = response.status_code
        if status == 429 or status >= 500:
            raise TransientEmbeddingError(
                f"http_{status}",
                f"{self.base_url}{path}: HTTP {status}: {response.text[:200]}",
                response.headers.get("retry-after"),
            )
        if status >= 400:
            raise RequestRejectedError(
                f"http_{status}",
                f"{self.base_url}{path}: HTTP {status}: {response.text[:200]}",
                status,
            )
        try:
            return response.json()
        except ValueError as error:
            raise TransientEmbeddingError(
                "bad_response", f"{self.base_url}{path}: response is not JSON"
            ) from error

    def _request(self, inputs: list[str]) -> list[Any]:
        """Native vectors for already-prefixed inputs, in input order."""
        if not inputs:
            return []
        if self.protocol == "ollama":
            body = self._send(
                "POST", "/api/embed", {"model": self.model, "input": inputs, "truncate": True}
            )
            vectors = body.get("embeddings") if isinstance(body, dict) else None
        else:
            body = self._send(
                "POST",
                "/v1/embeddings",
                {"model": self.model, "input": inputs, "encoding_format": "float"},
            )
            data = body.get("data") if isinstance(body, dict) else None
            vectors = None
            if isinstance(data, list) and all(isinstance(item, dict) for item in data):
                ordered = sorted(data, key=lambda item: item.get("index", 0))
                vectors = [item.get("embedding") for item in ordered]
        if not isinstance(vectors, list) or len(vectors) != len(inputs):
            raise TransientEmbeddingError(
                "bad_response",
                f"{self.base_url}: expected {len(inputs)} vectors, got "
                f"{len(vectors) if isinstance(vectors, list) else 'none'}",
            )
        return [vector if isinstance(vector, list) else [] for vector in vectors]

    def _listing(self) -> tuple[dict[str, Any], int | None, str | None]:
        """The model's entry, its reported dimension and revision (None when not reported)."""
        if self.protocol == "ollama":
            entries = (self._send("GET", "/api/tags") or {}).get("models") or []
            names = {self.model, f"{self.model}:latest"}
            entry = next(
                (e for e in entries if e.get("name") in names or e.get("model") in names), None
            )
            if entry is None:
                raise EndpointValidationError(self._not_listed([e.get("name") for e in entries]))
            details = entry.get("details") or {}
            dimension = details.get("embedding_length")
            if dimension is None:
                dimension = self._ollama_show_dimension()
            revision = details.get("revision")
            if revision is None and entry.get("digest"):
                revision = f"sha256.{str(entry['digest']).removeprefix('sha256:')[:16]}"
            return entry, dimension, revision
        entries = (self._send("GET", "/v1/models") or {}).get("data") or []
        entry = next((e for e in entries if e.get("id") == self.model), None)
        if entry is None:
            raise EndpointValidationError(self._not_listed([e.get("id") for e in entries]))
        dimension = entry.get("embedding_length") or entry.get("dimensions")
        return entry, dimension, entry.get("revision")

    def _ollama_show_dimension(self) -> int | None:
        try:
            info = (self._send("POST", "/api/show", {"model": self.model}) or {}).get(
                "model_info"
            ) or {}
        except RequestRejectedError:
            return None
        return next((v for k, v in info.items() if k.endswith(".embedding_length")), None)

    def _not_listed(self, names: list[Any]) -> str:
        listed = ", ".join(sorted(str(name) for name in names)) or "none"
        return f"embedding endpoint {self.base_url} does not serve model {self.model!r} " + (
            f"(it lists: {listed})"
        )

    def _validate(self) -> GenerationIdentity:
        where = f"embedding endpoint {self.base_url} ({self.protocol})"
        try:
            _, dimension, revision = self._listing()
            if dimension is not None and int(dimension) != self.native_dimension:
                raise EndpointValidationError(
                    f"{where}: model {self.model!r} has dimension {dimension}, expected "
                    f"{self.native_dimension} (SLACKQUERY_EMBEDDING_DIMENSION)"
                )
            if self.expected_revision and revision and revision != self.expected_revision:
                raise EndpointValidationError(
                    f"{where}: model {self.model!r} is revision {revision!r}, expected "
                    f"{self.expected_revision!r}"
                )
            identity = self._identity_for(revision)
            probe = self._request([self.document_prefix + PROBE_TEXT])
        except (TransientEmbeddingError, RequestRejectedError) as error:
            raise EndpointValidationError(f"{where} failed validation: {error}") from error
        _, invalid = finalize_vectors(probe, identity)
        if invalid:
            raise EndpointValidationError(f"{where}: probe vector rejected: {invalid[0]}")
        return identity
