"""slackquery.http_guard: the body deadline (the cap and auth are tested through both
servers, tests/serving and tests/embedding)."""

import json
from typing import Any

import anyio

from slackquery.http_guard import HttpGuard


def test_a_body_that_stalls_gets_408_and_never_reaches_the_app() -> None:
    reached: list[Any] = []
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": b'{"jsonrpc"', "more_body": True}]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await anyio.sleep_forever()  # the client sends nothing more
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    guard = HttpGuard(app, token=None, max_body_bytes=1024, body_timeout_s=0.05)
    anyio.run(guard, {"type": "http", "path": "/mcp", "headers": []}, receive, send)
    assert not reached
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"]) == {"error": "request body not received within 0.05 s"}
