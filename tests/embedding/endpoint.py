"""A scriptable embedding endpoint speaking both HTTP protocols (Ollama and OpenAI), with
deterministic vectors: the tests set what its listing and vectors are."""

import hashlib
import json
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from slackquery.embedding.http import PROBE_TEXT

MODEL = "fake-embed"
DIMENSION = 8


def hash_vector(text: str) -> list[float]:
    """A deterministic, non-zero vector per text."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [digest[i] / 255.0 + 0.01 for i in range(DIMENSION)]


class Endpoint:
    """Ollama's and OpenAI's routes, each answering what the test set; `vector` makes a
    document's vector (the validation probe always gets a good one)."""

    def __init__(self) -> None:
        self.reset()
        self.app = Starlette(
            routes=[
                Route("/api/tags", self.listing, methods=["GET"]),
                Route("/v1/models", self.listing, methods=["GET"]),
                Route("/api/embed", self.embed, methods=["POST"]),
                Route("/v1/embeddings", self.embed, methods=["POST"]),
            ]
        )

    def reset(self) -> None:
        """A good endpoint serving MODEL, with no request seen."""
        details = {"embedding_length": DIMENSION, "revision": "r1"}
        self.tags: Any = {"models": [{"name": MODEL, "details": details}]}
        self.models: Any = {"data": [{"id": MODEL, "dimensions": DIMENSION, "revision": "r1"}]}
        self.vector: Callable[[str], Any] = hash_vector
        self.paths: list[str] = []

    async def listing(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        return self._json(self.tags if request.url.path == "/api/tags" else self.models)

    async def embed(self, request: Request) -> Response:
        self.paths.append(request.url.path)
        inputs = (await request.json())["input"]
        vectors = [
            hash_vector(text) if PROBE_TEXT in text else self.vector(text) for text in inputs
        ]
        if request.url.path == "/api/embed":
            return self._json({"model": MODEL, "embeddings": vectors})
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        return self._json({"model": MODEL, "data": data})

    @staticmethod
    def _json(body: Any) -> Response:
        return Response(json.dumps(body, allow_nan=True), media_type="application/json")
