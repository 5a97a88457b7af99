"""Fixtures for the embedding tests: a state DB with documents and a real embed-server."""

from collections.abc import Iterator

import pytest

from slackquery.embedding.packaged import PACKAGED_MODELS
from slackquery.embedding.server import create_app
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts
from tests.loopback import serve

MODEL = PACKAGED_MODELS[Settings().embedding_model]  # the default e5 + MiniLM pair
API_KEY = "test-key-0123456789abcdef"


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
