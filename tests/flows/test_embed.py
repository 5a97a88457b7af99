"""The `embed` flow: task bodies via `.fn()`, the retry condition, and one end-to-end run."""

import logging
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from prefect.states import Completed, Failed

from flows._state import get_run, pop_run, put_run
from flows.embed import Pace, ProgressLog, embed_batch, embed_flow, enqueue, retry_transient
from slackquery.embedding.base import GenerationMismatchError
from slackquery.embedding.errors import RequestRejectedError, TransientEmbeddingError
from slackquery.embedding.work import EmbedRun
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts


@pytest.fixture
def run_key(settings: Settings) -> Iterator[str]:
    create_state_db(settings.state_path, message_texts(6))
    put_run("test-run", EmbedRun(settings.model_copy(update={"embedding_batch_size": 4})))
    yield "test-run"
    run = pop_run("test-run")
    if run is not None:
        run.close()


def test_task_bodies_compose_into_one_batch(run_key: str) -> None:
    prepared = enqueue.fn(run_key)
    assert prepared["enqueued"] == 6 and prepared["claimable"] == 6
    run = get_run(run_key)
    claim = run.claim(4)
    assert len(claim.items) == 4
    outcome = embed_batch.fn(run.embedder, run.generation_id, [item.text for item in claim.items])
    assert outcome.vectors is not None and outcome.vectors.shape == (4, 768)
    assert run.record(claim, outcome) == {"succeeded": 4, "failed": 0}


def test_a_deployed_run_logs_its_progress_once_a_minute(
    run_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A deployed run logged only "task finished" per batch for the hours of a first embedding.
    run = get_run(run_key)
    prepared = enqueue.fn(run_key)
    now = [0.0]
    pace = Pace(lambda: now[0])
    progress = ProgressLog(logging.getLogger("embed-test"), run, prepared["claimable"], pace)
    caplog.set_level(logging.INFO, logger="embed-test")
    for seconds in (30.0, 90.0):
        now[0] = seconds
        claim = run.claim(2)
        progress.record(claim, run.embed(claim))
    assert [record.getMessage() for record in caplog.records] == [
        "embedded 4 of 6 items (0 failed); 0.0 docs/s; about 1 min left"
    ]


def test_a_worker_with_another_generation_is_refused(run_key: str) -> None:
    with pytest.raises(GenerationMismatchError):
        embed_batch.fn(get_run(run_key).embedder, "another-generation", ["text"])


def _failed(error: Exception) -> Any:
    return Failed(data=error)


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (TransientEmbeddingError("http_503", "busy"), True),
        (TransientEmbeddingError("http_429", "slow down", "5"), True),
        (TransientEmbeddingError("http_429", "slow down", "3600"), False),
        (TransientEmbeddingError("timeout", "timed out"), True),
        (RequestRejectedError("http_400", "bad", 400), False),
        (ValueError("bug"), False),
    ],
)
def test_retry_condition_retries_only_short_transient_faults(error: Exception, retry: bool) -> None:
    assert retry_transient(embed_batch, None, _failed(error)) is retry  # type: ignore[arg-type]


def test_completed_state_is_not_retried() -> None:
    assert retry_transient(embed_batch, None, Completed(data=1)) is False  # type: ignore[arg-type]


def test_flow_embeds_everything_once_end_to_end(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_state_db(settings.state_path, message_texts(10))
    monkeypatch.setenv("SLACKQUERY_EMBEDDING_BATCH_SIZE", "4")
    result = embed_flow()
    assert result["counts"]["succeeded"] == 10 and result["batches"] == 3
    assert result["coverage"] == 1.0
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        attempts = connection.execute(
            "select distinct attempt_count from embedding_work_items"
        ).fetchall()
    finally:
        connection.close()
    assert attempts == [(1,)]
