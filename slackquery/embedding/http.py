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

Pickling (a Dask worker receives the embedder with every batch) ships only the
configuration, the API key included: each process that unpickles it builds its own client,
once, and validates the endpoint it reaches itself, so a worker that sees another model is
refused.
"""

import threading
import uuid
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
from slackquery.escaping import quoted
from slackquery.tls import client_context

Protocol = Literal["ollama", "openai"]
PROBE_TEXT = "slackquery endpoint probe"
# Unpickled embedders kept per process (see `_unpickled`): one per embed run that sent
# batches here, so a long-lived Dask worker keeps the last few, not every run's.
KEPT_COPIES = 8

_copies: dict[str, "HttpEmbedder"] = {}
_copies_lock = threading.Lock()


class HttpEmbedder:
    """An embedder behind an HTTP endpoint; thread-safe; validates itself on first use.

    `identity_for` builds the generation identity from the revision the endpoint reports
    (None when it reports none), so a pinned or packaged revision is checked against the
    endpoint rather than trusted; it must pickle (a `functools.partial` of a module-level
    function, not a closure) for the embedder to reach Dask workers.
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
        # What pickling ships: everything but the client, the lock and the identity.
        self._config: dict[str, Any] = {
            "protocol": protocol,
            "base_url": base_url,
            "model": model,
            "native_dimension": native_dimension,
            "document_prefix": document_prefix,
            "query_prefix": query_prefix,
            "expected_revision": expected_revision,
            "identity_for": identity_for,
            "api_key": api_key,
            "timeout_s": timeout_s,
            "transport": transport,
        }
        # Which embedder this is across processes: its copies keep the original's token.
        self._token = uuid.uuid4().hex
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
            base_url=self.base_url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            verify=client_context(),
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

    def __reduce__(self) -> tuple[Callable[..., "HttpEmbedder"], tuple[str, dict[str, Any]]]:
        return _unpickled, (self._token, self._config)

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
            if isinstance(data, list) and all(
                isinstance(item, dict) and _is_int(item.get("index", 0)) for item in data
            ):
                ordered = sorted(data, key=lambda item: item.get("index", 0))
                vectors = [item.get("embedding") for item in ordered]
        if not isinstance(vectors, list) or len(vectors) != len(inputs):
            raise TransientEmbeddingError(
                "bad_response",
                f"{self.base_url}: expected {len(inputs)} vectors, got "
                f"{len(vectors) if isinstance(vectors, list) else 'none'}",
            )
        return vectors  # each one is checked by finalize_vectors, row by row

    @property
    def _where(self) -> str:
        return f"embedding endpoint {self.base_url} ({self.protocol})"

    def _listing(self) -> tuple[dict[str, Any], int | None, str | None]:
        """The model's entry, its reported dimension and revision (None when not reported).

        A listing of the wrong shape (not an object, entries that are not objects, a
        dimension that is not a number) is the wrong service or a broken one: refused in one
        line, naming the path, rather than guessed around.
        """
        if self.protocol == "ollama":
            entries = self._entries("/api/tags", "models", "name")
            names = {self.model, f"{self.model}:latest"}
            entry = next(
                (e for e in entries if names & {str(e.get("name")), str(e.get("model"))}), None
            )
            if entry is None:
                raise EndpointValidationError(self._not_listed([e.get("name") for e in entries]))
            details = entry.get("details") or {}
            if not isinstance(details, dict):
                raise EndpointValidationError(
                    f"{self._where}: GET /api/tags: 'details' of model {self.model!r} is "
                    f"{_kind(details)}, not an object"
                )
            dimension, source = details.get("embedding_length"), "GET /api/tags"
            if dimension is None:
                dimension, source = self._ollama_show_dimension(), "POST /api/show"
            revision = details.get("revision")
            if revision is None and entry.get("digest"):
                revision = f"sha256.{str(entry['digest']).removeprefix('sha256:')[:16]}"
            return (
                entry,
                self._dimension(dimension, f"{source} reports embedding_length"),
                self._revision(revision, "GET /api/tags"),
            )
        entries = self._entries("/v1/models", "data", "id")
        entry = next((e for e in entries if e.get("id") == self.model), None)
        if entry is None:
            raise EndpointValidationError(self._not_listed([e.get("id") for e in entries]))
        field = "embedding_length" if entry.get("embedding_length") is not None else "dimensions"
        return (
            entry,
            self._dimension(entry.get(field), f"GET /v1/models reports {field}"),
            self._revision(entry.get("revision"), "GET /v1/models"),
        )

    def _entries(self, path: str, key: str, name: str) -> list[dict[str, Any]]:
        """The model entries of a listing: `{key: [{name: ...}, ...]}`, checked."""
        body = self._send("GET", path)
        entries = body.get(key) if isinstance(body, dict) else None
        if entries is None and isinstance(body, dict):
            entries = []  # an endpoint with no model at all
        if not isinstance(entries, list):
            got = _kind(body) if not isinstance(body, dict) else f"{key!r} as {_kind(entries)}"
            raise EndpointValidationError(
                f"{self._where}: GET {path} is not a model listing: expected an object with a "
                f"{key!r} list, got {got}"
            )
        for entry in entries:
            if not isinstance(entry, dict):
                raise EndpointValidationError(
                    f"{self._where}: GET {path} is not a model listing: {key!r} holds "
                    f"{_kind(entry)}, expected objects with a {name!r}"
                )
        return entries

    def _dimension(self, value: Any, reported: str) -> int | None:
        """A reported dimension as an int (None: not reported); anything else is refused.
        `reported` says where it came from: `GET /api/tags reports embedding_length`."""
        if value is None:
            return None
        if _is_int(value):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        raise EndpointValidationError(
            f"{self._where}: {reported} {quoted(value)} for model {self.model!r}, which is "
            "not a whole number"
        )

    def _revision(self, value: Any, path: str) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise EndpointValidationError(
            f"{self._where}: {path} reports revision {quoted(value)} for model {self.model!r}, "
            "which is not a string"
        )

    def _ollama_show_dimension(self) -> Any:
        try:
            body = self._send("POST", "/api/show", {"model": self.model})
        except RequestRejectedError:
            return None
        info = (body.get("model_info") if isinstance(body, dict) else None) or {}
        if not isinstance(info, dict):
            raise EndpointValidationError(
                f"{self._where}: POST /api/show: 'model_info' is {_kind(info)}, not an object"
            )
        return next((v for k, v in info.items() if str(k).endswith(".embedding_length")), None)

    def _not_listed(self, names: list[Any]) -> str:
        listed = ", ".join(sorted(str(name) for name in names)) or "none"
        return f"embedding endpoint {self.base_url} does not serve model {self.model!r} " + (
            f"(it lists: {listed})"
        )

    def _validate(self) -> GenerationIdentity:
        where = self._where
        try:
            _, dimension, revision = self._listing()
            if dimension is not None and dimension != self.native_dimension:
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


def _unpickled(token: str, config: dict[str, Any]) -> HttpEmbedder:
    """This process's copy of the embedder pickled under `token`, built once per process
    (a new client and lock; it validates the endpoint on first use), as
    `in_process_embedder` is for the packaged model: every batch a Dask worker receives
    unpickles to the same copy."""
    with _copies_lock:
        embedder = _copies.get(token)
        if embedder is None:
            embedder = _copies[token] = HttpEmbedder(**config)
            embedder._token = token
            while len(_copies) > KEPT_COPIES:  # the oldest; a batch still using it keeps it
                del _copies[next(iter(_copies))]
        return embedder


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """What a JSON value is, for an error message: `a list`, `a string ('fake')`."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    name = names.get(type(value), "null" if value is None else "a number")
    return f"{name} ({quoted(value)})" if isinstance(value, str | int | float) else name
