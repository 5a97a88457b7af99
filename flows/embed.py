"""Prefect flow `embed`: vectors for every active message document, resumable after any crash.

Reads `search_documents` (active messages and their `text_embedding` / `text_hash`) from the
state DuckDB; writes `embedding_generations` and `embedding_work_items` there (contract:
docs/architecture.md). Each batch is claimed under a lease and its outcome committed at
once, so re-running is always safe: an unchanged corpus enqueues nothing, succeeded items
are never claimed again, and a killed run's leases are reclaimed (at expiry, or at once
when the owning process is gone).

Project decision (STYLE §9): the state DB, not Prefect results or caching, is the source of
truth, so tasks neither cache nor persist results. Prefect retries the embedding request
for transient faults inside a run; the work-item rows carry retries across runs.
"""

import time
import uuid
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import State
from prefect.tasks import Task

from flows._state import get_run, pop_run, put_run
from slackquery.embedding.errors import TransientEmbeddingError
from slackquery.embedding.http import parse_retry_after
from slackquery.embedding.state import Claim
from slackquery.embedding.work import BatchOutcome, EmbedRun, drive_batches, utc_now
from slackquery.settings import get_settings

# A Retry-After longer than this is not waited out inside the run: the items are recorded
# as retryable_failed with that retry time and a later run picks them up.
MAX_IN_RUN_WAIT_S = 30.0


def retry_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only transient faults (network, timeout, 429, 5xx) with a short Retry-After."""
    try:
        state.result()
    except TransientEmbeddingError as error:
        delay = parse_retry_after(error.retry_after, utc_now)
        return delay is None or delay <= MAX_IN_RUN_WAIT_S
    except Exception:
        return False
    return False


@task(cache_policy=NO_CACHE, persist_result=False)
def enqueue(run_key: str) -> dict[str, int]:
    """Register the generation, release dead leases and enqueue new or changed documents."""
    return get_run(run_key).prepare()


@task(cache_policy=NO_CACHE, persist_result=False)
def claim_batch(run_key: str, limit: int) -> Claim:
    """Lease the next batch of claimable items (committed before embedding)."""
    return get_run(run_key).claim(limit)


@task(
    cache_policy=NO_CACHE,
    persist_result=False,
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient,
)
def embed_batch(run_key: str, claim: Claim) -> BatchOutcome:
    """Embed one claimed batch; raises TransientEmbeddingError so Prefect can retry it."""
    outcome = get_run(run_key).embed(claim)
    if outcome.error_class is not None:
        raise TransientEmbeddingError(
            outcome.error_class, outcome.error_message or "", outcome.retry_after
        )
    return outcome


@task(cache_policy=NO_CACHE, persist_result=False)
def record_batch(run_key: str, claim: Claim, outcome: BatchOutcome) -> dict[str, int]:
    """Commit a batch's vectors and failures."""
    return get_run(run_key).record(claim, outcome)


@flow(name="embed", log_prints=False)
def embed_flow(max_items: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Embed all claimable work items of the configured generation; return counts by state.

    Settings are read from the environment inside the flow rather than passed in: flow
    parameters are stored by the Prefect API, and settings may hold the endpoint's key.
    """
    settings = get_settings()
    logger = get_run_logger()
    started = time.perf_counter()
    run_key = uuid.uuid4().hex
    put_run(run_key, EmbedRun(settings))
    try:
        run = get_run(run_key)
        prepared = enqueue(run_key)
        logger.info("generation %s: %s", run.generation_id, prepared)

        def embed_or_give_up(claim: Claim) -> BatchOutcome:
            try:
                return embed_batch(run_key, claim)
            except TransientEmbeddingError as error:
                logger.warning("batch failed after retries: %s", error)
                return BatchOutcome(
                    error_class=error.error_class,
                    error_message=str(error),
                    retry_after=error.retry_after,
                )

        drive_batches(
            run,
            prepared["claimable"],
            max_items=max_items,
            progress=progress,
            claim=lambda limit: claim_batch(run_key, limit),
            embed=embed_or_give_up,
            record=lambda claim, outcome: record_batch(run_key, claim, outcome),
        )
        summary = run.summary(started, prepared)
        logger.info("embed finished: %s", summary["counts"])
        return summary
    finally:
        finished = pop_run(run_key)
        if finished is not None:
            finished.close()
