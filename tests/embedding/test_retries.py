"""Each retry path, driven by a fault-injecting HTTP endpoint and an injected clock."""

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import duckdb
import pytest

from slackquery.cli import main
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


def _run(settings: Settings, clock: Clock, **options: object) -> dict:
    return embed_pending(
        settings, embedder=build_embedder(settings), now=clock, rng=random.Random(7), **options
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
        (0, T0 + timedelta(seconds=delay_s), "http_429")  # a rate limit charges no attempt
    }
    clock.at = T0 + timedelta(seconds=delay_s - 1)
    assert _run(config, clock)["claimed"] == 0  # not yet due
    clock.at = T0 + timedelta(seconds=delay_s)
    second = _run(config, clock)
    assert second["counts"]["succeeded"] == 8 and second["claimed"] == 4
    assert {row[1] for row in _rows(config).values()} == {1}
    assert len(endpoint.requests) == 3  # only the 429'd batch was sent twice


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
    assert {(row[0], row[1], row[3]) for row in rows} == {("retryable_failed", 0, error_class)}
    delays = {(row[2] - T0).total_seconds() for row in rows}
    assert len(delays) == 1 and 2 <= delays.pop() < 3  # first failure: 2^1 s + jitter


def test_an_outage_charges_no_attempt_and_backs_off_longer_each_run(
    settings: Settings, faults: tuple[FaultEndpoint, str], endpoint: FaultEndpoint
) -> None:
    """Five runs during an outage once made every document terminal_failed for good."""
    config = _settings(settings, faults[1], message_texts(8))  # 2 batches, max_attempts 3
    clock = Clock()
    for run in range(1, 6):
        endpoint.faults.extend([("500", None)] * 2)
        assert _run(config, clock)["claimed"] == 8
        rows = list(_rows(config).values())
        assert {(row[0], row[1], row[3]) for row in rows} == {("retryable_failed", 0, "http_500")}
        for row in rows:  # 2^run s + jitter: the backoff still grows through the outage
            assert 2**run <= (row[2] - clock.at).total_seconds() < 2**run + 1
        clock.at = max(row[2] for row in rows)
    recovered = _run(config, clock)
    assert recovered["counts"]["succeeded"] == 8 and recovered["counts"]["terminal_failed"] == 0
    assert {row[1] for row in _rows(config).values()} == {1}


@pytest.mark.parametrize(
    ("fault", "retry_after", "wait_s"), [("500", None, None), ("429", "3600", 3600)]
)
def test_a_failing_endpoint_stops_the_run_after_three_batches_in_a_row(
    settings: Settings,
    faults: tuple[FaultEndpoint, str],
    endpoint: FaultEndpoint,
    fault: str,
    retry_after: str | None,
    wait_s: int | None,
) -> None:
    config = _settings(settings, faults[1], message_texts(20))  # 5 batches of 4
    endpoint.faults.extend([(fault, retry_after)] * 5)
    result = _run(config, Clock())
    assert len(endpoint.requests) == 3 and result["batches"] == 3
    assert result["stopped"].startswith("the embedding endpoint failed 3 batches in a row: ")
    assert f"HTTP {fault}" in result["stopped"]
    counts = result["counts"]
    assert (counts["retryable_failed"], counts["pending"], counts["in_progress"]) == (12, 8, 0)
    if wait_s is not None:  # the failed items wait as long as the endpoint asked
        waits = {row[2] for row in _rows(config).values() if row[0] == "retryable_failed"}
        assert waits == {T0 + timedelta(seconds=wait_s)}


def test_a_batch_that_succeeds_restarts_the_count_of_failures_in_a_row(
    settings: Settings, faults: tuple[FaultEndpoint, str], endpoint: FaultEndpoint
) -> None:
    config = _settings(settings, faults[1], message_texts(20))
    endpoint.faults.extend([("500", None)] * 2 + [("ok", None)] + [("500", None)] * 2)
    result = _run(config, Clock())
    assert result["stopped"] is None and result["batches"] == 5
    assert (result["counts"]["succeeded"], result["counts"]["retryable_failed"]) == (4, 16)


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
    connection = duckdb.connect(str(config.state_path), read_only=True)
    [(said,)] = connection.execute(
        "select error_message from embedding_work_items where error_class = 'http_400'"
    ).fetchall()
    connection.close()
    assert "HTTP 400" in said and not said.startswith("http_400")  # the class, stored once
    for _ in (2, 3):
        clock.at += timedelta(hours=1)
        _run(config, clock)
    rows = _rows(config)
    terminal = {doc: row for doc, row in rows.items() if row[0] == "terminal_failed"}
    assert len(terminal) == 3 and {row[1] for row in terminal.values()} == {3}
    assert all(row[2] is None for row in terminal.values())  # no retry scheduled
    clock.at += timedelta(days=1)
    assert _run(config, clock)["claimed"] == 0  # terminal items are never claimed again
    again = _run(config, clock, retry_failed=True)  # until asked to try them again
    assert again["retried_failed"] == 3 and again["claimed"] == 3
    retried = [row for row in _rows(config).values() if row[0] != "succeeded"]
    assert {(row[0], row[1]) for row in retried} == {("retryable_failed", 1)}


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


def test_the_command_exits_1_when_the_endpoint_kept_failing_and_retries_terminal_items(
    settings: Settings,
    faults: tuple[FaultEndpoint, str],
    endpoint: FaultEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _settings(settings, faults[1], message_texts(20))
    for name in ("transport", "url", "model", "dimension", "batch_size", "timeout_s"):
        monkeypatch.setenv(
            f"SLACKQUERY_EMBEDDING_{name.upper()}", str(getattr(config, f"embedding_{name}"))
        )
    for name in ("document_prefix", "query_prefix"):
        monkeypatch.setenv(
            f"SLACKQUERY_EMBEDDING_{name.upper()}", getattr(config, f"embedding_{name}")
        )
    endpoint.faults.extend([("500", None)] * 3)
    assert main(["embed", "--engine", "plain"]) == 1
    *_, waiting, stopped = capsys.readouterr().out.splitlines()
    assert waiting.startswith("waiting     12 retryable_failed item(s); the first is due at ")
    assert stopped.startswith("stopped     the embedding endpoint failed 3 batches in a row: ")
    assert stopped.endswith("; the next run resumes")

    connection = duckdb.connect(str(config.state_path))
    connection.execute(
        "update embedding_work_items set state = 'terminal_failed', next_attempt_at = null "
        "where state = 'pending'"
    )
    connection.close()
    assert main(["embed", "--engine", "plain"]) == 1  # terminal items are not claimed
    assert capsys.readouterr().out.splitlines()[-1] == (
        "failed      8 item(s) terminal_failed; `slackquery embed --retry-failed` tries them again"
    )
    assert main(["embed", "--engine", "plain", "--retry-failed"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "retried     8 terminal_failed item(s)"
    assert "8 embedded" in lines[2]
