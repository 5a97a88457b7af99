"""The one HTTP guard of both servers (`serve` and `embed-server`): bearer key and body cap.

ASGI middleware, so it holds for every route, the MCP SDK's included:
- Bearer auth on every path but `public_paths`: the header is compared as bytes with
  `hmac.compare_digest` (constant time wherever the first difference is); the scheme is
  case-insensitive, as RFC 6750 says. An authorizer that cannot decide (the grants file
  is unreadable) refuses with 503 and logs why, one line a request.
- A body cap on the bytes actually received: a declared `Content-Length` over the cap is
  refused before reading, and a chunked body is read up to the cap and refused (413) the
  moment it passes it. The app then gets the whole body in one message, so nothing behind
  the guard ever sees a cut-off body or a fake disconnect (which the SDK answered with 500).
- A body deadline: a body not received whole within `body_timeout_s` gets 408, so a client
  that stalls mid-body cannot hold its connection forever (uvicorn has no read timeout; a
  client stalling in its headers is the reverse proxy's to cut).
"""

import hmac
import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from slackquery.errors import SlackqueryError

logger = logging.getLogger(__name__)

# The JSON body of an error reply: (request path, HTTP status, message) -> object.
ErrorBody = Callable[[str, int, str], dict[str, object]]
# Who a request's Authorization header (raw bytes) is: (allowed, identity).
Authorizer = Callable[[bytes], tuple[bool, Any]]


def plain_error(path: str, status: int, message: str) -> dict[str, object]:
    """`{"error": message}`, the shape of the MCP server's and Ollama's errors."""
    return {"error": message}


# Ample for a capped body (1 MiB by default) over a slow link.
BODY_TIMEOUT_S = 30.0


class _TooLarge(Exception):
    """The request body passed the cap."""


class HttpGuard:
    """Bearer key (optional) and request body cap in front of an ASGI app."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        public_paths: frozenset[str] = frozenset(),
        realm: str | None = None,
        error_body: ErrorBody = plain_error,
        authorizer: Authorizer | None = None,
        identity: ContextVar[Any] | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ):
        """`authorizer` replaces the bearer-key check (the MCP server's grants); the
        identity it returns is set in `identity` while the app handles the request."""
        self.app = app
        self.authorizer = authorizer
        self.identity = identity
        self.token = token.encode("utf-8") if token else None
        self.max_body_bytes = max_body_bytes
        self.public_paths = public_paths
        self.challenge = f'Bearer realm="{realm}"' if realm else "Bearer"
        self.error_body = error_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        path = scope.get("path", "")
        allowed, who = True, None
        if path not in self.public_paths:
            try:
                allowed, who = (self.authorizer or self._authorized)(
                    headers.get(b"authorization", b"")
                )
            except SlackqueryError as error:
                logger.error("refused %s: access cannot be checked: %s", path, error)
                await self._reply(send, path, 503, "access cannot be checked now; see the log")
                return
        if not allowed:
            await self._reply(send, path, 401, "missing or wrong bearer key")
            return
        try:
            with anyio.fail_after(self.body_timeout_s):
                body = await self._read_body(headers.get(b"content-length"), receive)
        except _TooLarge:
            await self._reply(send, path, 413, f"request body over {self.max_body_bytes} bytes")
            return
        except TimeoutError:
            timeout = f"{self.body_timeout_s:g}"
            await self._reply(send, path, 408, f"request body not received within {timeout} s")
            return
        if body is None:
            return
        reset = self.identity.set(who) if self.identity is not None else None
        try:
            await self.app(scope, _replay(body, receive), send)
        finally:
            if reset is not None and self.identity is not None:
                self.identity.reset(reset)

    def _authorized(self, header: bytes) -> tuple[bool, None]:
        if self.token is None:
            return True, None
        scheme, _, given = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token), None

    async def _read_body(self, declared: bytes | None, receive: Receive) -> bytes | None:
        """The whole body (None if the client went away); `_TooLarge` past the cap."""
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _reply(self, send: Send, path: str, status: int, message: str) -> None:
        payload = json.dumps(self.error_body(path, status, message)).encode("utf-8")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode("ascii")),
        ]
        if status == 401:
            headers.append((b"www-authenticate", self.challenge.encode("ascii")))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands over the body read already, then the client's later messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay
