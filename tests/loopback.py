"""A real HTTP server for tests: uvicorn in a thread on a free loopback port."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import uvicorn
from starlette.types import ASGIApp

from slackquery.listening import listen_on


@contextmanager
def serve(app: ASGIApp, *, lifespan: Literal["on", "off"] = "off") -> Iterator[str]:
    """Run `app` under uvicorn on a free loopback port; yield its base URL.

    The socket is bound and listening before the thread starts, so requests queue in the
    kernel's backlog until uvicorn accepts them: no polling for readiness, no sleeps. It is
    bound as `slackquery serve` binds its own (`listen_on`), so asyncio turns Nagle's
    algorithm off on each connection: on a bare `socket.socket()` it cannot tell the
    protocol is TCP, and every response waited ~40 ms for a delayed ACK.
    """
    (sock,) = listen_on("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
