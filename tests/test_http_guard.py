"""slackquery.http_guard: the body deadline and an authorizer that cannot decide (the cap
and auth are tested through both servers, tests/serving and tests/embedding)."""

import json
from typing import Any

import anyio
import pytest

from slackquery.errors import SlackqueryError
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


def test_an_authorizer_that_cannot_decide_gets_503_and_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An unreadable grants file answered every request, the admin's too, with a plain 500
    # and an ASGI traceback in the log.
    reached: list[Any] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    def unreadable(header: bytes) -> tuple[bool, None]:
        raise SlackqueryError("grants file access/grants.json is unreadable: Expecting value")

    guard = HttpGuard(app, token=None, max_body_bytes=1024, authorizer=unreadable)
    anyio.run(guard, {"type": "http", "path": "/mcp", "headers": []}, None, send)
    assert not reached
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"]) == {"error": "access cannot be checked now; see the log"}
    assert caplog.messages == [
        "refused /mcp: access cannot be checked: grants file access/grants.json is unreadable: "
        "Expecting value"
    ]
