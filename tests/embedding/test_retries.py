"""Each retry path, driven by a fault-injecting HTTP endpoint and an injected clock."""

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import duckdb
import pytest

from slackquery.embedding import build_embedder
from slackquery.embedding.errors import EndpointValidationError
from slackquery.embedding.work import backoff_delay, embed_pending
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts
from tests.embedding.faults import FAULT_MODEL, FAULT_REVISION, FaultEndpoint
from tests.loopback import serve

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class Clock:
    """A settable clock: runs see exactly the time the test says."""

    def __init__(self, at: datetime = T0):
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture(scope="module")
def faults() -> Iterator[tuple[FaultEndpoint, str]]:
    endpoint = FaultEndpoint()
    with serve(endpoint.app) as url:
        yield endpoint, url
        endpoint.release()


@pytest.fixture
def endpoint(faults: tuple[FaultEndpoint, str]) -> FaultEndpoint:
    endpoint, _ = faults
    endpoint.faults.clear()
    endpoint.requests.clear()
    endpoint.hold = asyncio.Event()
    return endpoint


def _settings(settings: Settings, url: str, texts: list[str], **extra: object) -> Settings:
    create_state_db(settings.state_path, texts)
    return settings.model_copy(
        update={
            "embedding_transport": "ollama",
            "embedding_url": url,
            "embedding_model": FAULT_MODEL,
            "embedding_dimension": 384,
            "embedding_document_prefix": "passage: ",
            "embedding_query_prefix": "query: ",
            "embedding_batch_size": 4,
            "embedding_timeout_s": 2.0,
            "embedding_max_attempts": 3,
            **extra,
        }
    )


def _rows(settings: Settings) -> dict[str, tuple]:
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        rows = connection.execute(
            "select document_id, state, attempt_count, next_attempt_at, error_class "
            "from embedding_work_items order by document_id"
        ).fetchall()
    finally:
        connection.close()
    return {row[0]: row[1:] for row in rows}


def _run(settings: Settings, clock: Clock) -> dict:
    return embed_pending(
        settings, embedder=build_embedder(settings), now=clock, rng=random.Random(7)
    )


def test_backoff_is_capped_exponential_with_jitter() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(attempt, 300.0, rng) for attempt in (1, 2, 5, 12)]
    assert 2 <= delays[0] < 3 and 4 <= delays[1] < 5 and 32 <= delays[2] < 33
    assert 256 <= delays[3] < 257  # the exponent stops growing at 2^8
    assert 100 <= backoff_delay(7, 100.0, rng) < 101  # the cap


@pytest.mark.parametrize(
    ("retry_after", "delay_s"),
    [("120", 120), (format_datetime(T0 + timedelta(seconds=45), usegmt=True), 45)],
)
def test_429_honours_retry_after_then_succeeds(
    settings: Settings,
    faults: tuple[FaultEndpoint, str],
    endpoint: FaultEndpoint,
    retry_after: str,
    delay_s: int,
) -> None:
    config = _settings(settings, faults[1], message_texts(8))
    endpoint.faults.append(("429", retry_after))
    clock = Clock()
    first = _run(config, clock)
    assert first["counts"]["retryable_failed"] == 4 and first["counts"]["succeeded"] == 4
    failed = [row for row in _rows(config).values() if row[0] == "retryable_failed"]
    assert {(row[1], row[2], row[3]) for row in failed} == {
        (1, T0 + timedelta(seconds=delay_s), "http_429")
    }
    clock.at = T0 + timedelta(seconds=delay_s - 1)
    assert _run(config, clock)["claimed"] == 0  # not yet due
    clock.at = T0 + timedelta(seconds=delay_s)
    second = _run(config, clock)
    assert second["counts"]["succeeded"] == 8 and second["claimed"] == 4
    attempts = sorted(row[1] for row in _rows(config).values())
    assert attempts == [1, 1, 1, 1, 2, 2, 2, 2]  # only the 429'd batch was embedded twice


@pytest.mark.parametrize(("fault", "error_class"), [("500", "http_500"), ("timeout", "timeout")])
def test_5xx_and_timeouts_back_off_exponentially(
    settings: Settings,
    faults: tuple[FaultEndpoint, str],
    endpoint: FaultEndpoint,
    fault: str,
    error_class: str,
) -> None:
    config = _settings(settings, faults[1], message_texts(4))
    endpoint.faults.append((fault, None))
    result = _run(config, Clock())
    endpoint.release()
    assert result["counts"]["retryable_failed"] == 4
    rows = list(_rows(config).values())
    assert {(row[0], row[1], row[3]) for row in rows} == {("retryable_failed", 1, error_class)}
    delays = {(row[2] - T0).total_seconds() for row in rows}
    assert len(delays) == 1 and 2 <= delays.pop() < 3  # attempt 1: 2^1 s + jitter


def test_invalid_vectors_fail_only_their_items_then_go_terminal(
    settings: Settings, faults: tuple[FaultEndpoint, str], endpoint: FaultEndpoint
) -> None:
    texts = message_texts(6)
    texts[1] += " [nan]"
    texts[2] += " [dim]"
    texts[4] += " [reject]"
    config = _settings(settings, faults[1], texts)
    clock = Clock()
    result = _run(config, clock)
    assert result["counts"]["succeeded"] == 3 and result["counts"]["retryable_failed"] == 3
    failed = sorted(
        (doc.split(":")[-1], row[3]) for doc, row in _rows(config).items() if row[0] != "succeeded"
    )
    assert failed == [
        ("1700000001.000100", "invalid_vector"),
        ("1700000002.000100", "invalid_vector"),
        ("1700000004.000100", "http_400"),
    ]
    for _ in (2, 3):
        clock.at += timedelta(hours=1)
        _run(config, clock)
    rows = _rows(config)
    terminal = {doc: row for doc, row in rows.items() if row[0] == "terminal_failed"}
    assert len(terminal) == 3 and {row[1] for row in terminal.values()} == {3}
    assert all(row[2] is None for row in terminal.values())  # no retry scheduled
    clock.at += timedelta(days=1)
    assert _run(config, clock)["claimed"] == 0  # terminal items are never claimed again


def test_probe_with_wrong_dimension_fails_validation(
    settings: Settings, faults: tuple[FaultEndpoint, str], endpoint: FaultEndpoint
) -> None:
    config = _settings(settings, faults[1], message_texts(2), embedding_dimension=512)
    with pytest.raises(EndpointValidationError, match="dimension 384, expected 512"):
        _ = build_embedder(config).identity
    config = config.model_copy(
        update={"embedding_dimension": 384, "embedding_model_revision": FAULT_REVISION}
    )
    assert build_embedder(config).identity.model_revision == FAULT_REVISION
