"""The embed loop in plain Python: enqueue, then claim → embed → record until nothing is left.

`embed_pending` is what `slackquery embed` runs by default and what the Prefect flow's tasks
wrap piece by piece (`EmbedRun.claim`, `EmbedRun.embed`, `EmbedRun.record`). All state is in
the state DB (see `slackquery.embedding.state`), so a run may die at any point: claims it
held are reclaimed by the next run (at lease expiry, or at once when the owner process is
provably dead), and succeeded items are never claimed again.

Failures: a transient batch failure (the endpoint down, rate limiting, timing out, answering
garbage) leaves its items retryable without charging them an attempt; only item failures
count toward `embedding_max_attempts` (see `state`). After MAX_FAILED_BATCHES_IN_A_ROW
transient failures in a row a run stops claiming and says why in its summary (`stopped`).
Interrupted with Ctrl-C, a run hands its unrecorded claims back uncharged before it exits.
"""

import contextlib
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import duckdb
import numpy as np

from slackquery import interrupts
from slackquery.crash import crash_point
from slackquery.embedding import build_embedder, state
from slackquery.embedding.base import Embedder
from slackquery.embedding.errors import RequestRejectedError, TransientEmbeddingError
from slackquery.embedding.run_progress import RunProgress
from slackquery.errors import SlackqueryError
from slackquery.retry_after import parse_retry_after
from slackquery.settings import Settings

Clock = Callable[[], datetime]
# The smallest batch guided scheduling shrinks to: below it a task's scheduling and
# task-run bookkeeping would outweigh the idle time it saves.
MIN_GUIDED_BATCH = 32
# How much write-ahead log an embed run lets grow before DuckDB checkpoints (see EmbedRun).
CHECKPOINT_THRESHOLD = "1GB"
# Batches failing transiently in a row after which a run stops claiming. The endpoint is then
# down, black-holed or rate limiting: each further batch would wait out the whole timeout
# (120 s by default) or ignore the server's Retry-After, for days on a large corpus. Three
# tell an outage from a blip (one 5xx or timeout) at a cost of three timeouts; the failed
# items stay retryable, the rest pending, and a later run picks them up.
MAX_FAILED_BATCHES_IN_A_ROW = 3


def utc_now() -> datetime:
    """The real clock (tests inject their own)."""
    return datetime.now(UTC)


def backoff_delay(attempt: int, cap_s: float, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: min(cap, 2^min(attempt, 8)) + U[0, 1) seconds."""
    return min(cap_s, float(2 ** min(attempt, 8))) + rng.random()


@dataclass
class BatchOutcome:
    """What happened to one claimed batch, before it is recorded."""

    vectors: np.ndarray | None = None
    invalid: dict[int, str] = field(default_factory=dict)
    error_class: str | None = None
    error_message: str | None = None
    retry_after: str | None = None
    model_s: float = 0.0


def embed_texts(embedder: Embedder, texts: list[str]) -> BatchOutcome:
    """Embed one batch and classify the result; never raises for endpoint faults.

    A request rejected as a whole (4xx other than 429) is retried item by item, so one
    document the endpoint refuses does not charge its batch-mates an attempt.
    """
    started = time.perf_counter()
    try:
        vectors, invalid = embedder.embed_document_batch(texts)
        return BatchOutcome(vectors, invalid, model_s=time.perf_counter() - started)
    except TransientEmbeddingError as error:
        return BatchOutcome(
            error_class=error.error_class,
            error_message=str(error),
            retry_after=error.retry_after,
            model_s=time.perf_counter() - started,
        )
    except RequestRejectedError as error:
        if len(texts) == 1:
            return BatchOutcome(
                invalid={0: f"{error.error_class}: {error}"},
                vectors=None,
                model_s=time.perf_counter() - started,
            )
    vectors = np.zeros((len(texts), embedder.identity.stored_dimension), dtype=np.float32)
    invalid = {}
    for index, text in enumerate(texts):
        single = embed_texts(embedder, [text])
        if single.error_class is not None:
            return BatchOutcome(
                error_class=single.error_class,
                error_message=single.error_message,
                retry_after=single.retry_after,
                model_s=time.perf_counter() - started,
            )
        if single.invalid or single.vectors is None:
            invalid[index] = single.invalid.get(0, "rejected")
        else:
            vectors[index] = single.vectors[0]
    return BatchOutcome(vectors, invalid, model_s=time.perf_counter() - started)


class EmbedRun:
    """One embed run against the state DB: its connection, clock, randomness and tallies."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        now: Clock = utc_now,
        rng: random.Random | None = None,
        connection: duckdb.DuckDBPyConnection | None = None,
    ):
        if connection is None and not settings.state_path.exists():
            # Refused before anything is written: an empty state file would only hide this.
            raise SlackqueryError(
                f"no state database at {settings.state_path}: run `slackquery project` first"
            )
        self.settings = settings
        self.embedder = embedder or build_embedder(settings)
        self.identity = self.embedder.identity  # validates an HTTP endpoint before any claim
        self.generation_id = self.identity.generation_id
        self.now = now
        self.rng = rng or random.Random()
        self._owns_connection = connection is None
        self.connection = connection or state.connect(settings.state_path)
        # Each batch's vectors go to the write-ahead log; DuckDB's default 16 MB threshold
        # checkpointed every ~10 batches of 512, rewriting the vectors' row groups each
        # time (half the recording CPU, measured). Commits stay durable in the log.
        self.connection.execute(f"set checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        self.claims = state.ClaimQueue(self.connection, self.generation_id)
        self.tally = {"claimed": 0, "succeeded": 0, "failed": 0, "batches": 0}
        self.model_s = 0.0
        # Why the run stopped claiming early (None: it ran until nothing was claimable).
        self.stopped: str | None = None
        self.failed_in_a_row = 0
        # Lease ids of this run's claims not recorded yet, handed back on Ctrl-C.
        self._unrecorded: set[str] = set()
        # What `embedding-status` reads while this run holds the state (from `prepare`).
        self.progress: RunProgress | None = None

    def close(self) -> None:
        """Close the connection if this run opened it, and remove its progress file."""
        if self.progress is not None:
            self.progress.remove()
        if self._owns_connection:
            self.connection.close()

    def prepare(self, *, retry_failed: bool = False) -> dict[str, int]:
        """Schema, generation record, dead leases released, new work enqueued, and with
        `retry_failed` the terminal_failed items made pending again."""
        state.require_documents(self.connection, self.settings.state_path)
        now = self.now()
        with state.transaction(self.connection):
            state.ensure_schema(self.connection)
            state.register_generation(self.connection, self.identity, now)
            released = state.release_dead_leases(self.connection, self.generation_id, now)
            enqueued = state.enqueue(self.connection, self.generation_id, now)
            retried = (
                state.retry_failed(self.connection, self.generation_id, now) if retry_failed else 0
            )
        claimable = state.count_claimable(self.connection, self.generation_id, now)
        self.progress = RunProgress(self.settings.state_path, self.generation_id, now)
        self.progress.update(now, claimable=claimable, **self.tally)
        return {
            "enqueued": enqueued,
            "released_leases": released,
            "retried_failed": retried,
            "claimable": claimable,
        }

    def claim(self, limit: int) -> state.Claim:
        """Lease the next batch (committed before any embedding starts)."""
        # Known before the lease commits, so an interrupt at any point can hand it back.
        lease_id = state.new_lease_id()
        self._unrecorded.add(lease_id)
        claim = self.claims.claim(
            limit, lease_s=self.settings.embedding_lease_s, now=self.now(), lease_id=lease_id
        )
        if not claim.items:
            self._unrecorded.discard(lease_id)
        self.tally["claimed"] += len(claim.items)
        return claim

    def embed(self, claim: state.Claim) -> BatchOutcome:
        """Embed a claimed batch (no database access)."""
        return embed_texts(self.embedder, [item.text for item in claim.items])

    def retry_delay(self, outcome: BatchOutcome, attempt: int) -> float:
        """Retry-After when the endpoint sent one, else capped exponential backoff."""
        delay = parse_retry_after(outcome.retry_after, self.now())
        if delay is not None:
            return delay
        return backoff_delay(attempt, self.settings.embedding_backoff_max_s, self.rng)

    def record(self, claim: state.Claim, outcome: BatchOutcome) -> dict[str, int]:
        """Commit the batch's outcome: vectors for good items, failures for the rest.

        A transient batch failure charges no attempt (`state.record_transient_failures`);
        its backoff grows with the items' transient failures in a row.
        """
        self.model_s += outcome.model_s
        now = self.now()
        max_attempts = self.settings.embedding_max_attempts
        succeeded = failed = 0
        if outcome.error_class is not None:
            in_a_row = 1 + max((item.transient_failures for item in claim.items), default=0)
            failed += state.record_transient_failures(
                self.connection,
                self.generation_id,
                claim.lease_id,
                claim.items,
                error_class=outcome.error_class,
                error_message=outcome.error_message or outcome.error_class,
                next_attempt_at=now + timedelta(seconds=self.retry_delay(outcome, in_a_row)),
                now=now,
            )
        else:
            attempt = max((item.attempt_count for item in claim.items), default=1)
            next_at = now + timedelta(seconds=self.retry_delay(outcome, attempt))
            good = [i for i in range(len(claim.items)) if i not in outcome.invalid]
            if good and outcome.vectors is not None:
                succeeded += state.record_successes(
                    self.connection,
                    self.generation_id,
                    claim.lease_id,
                    [claim.items[i] for i in good],
                    outcome.vectors[good],
                    now,
                )
            for index, reason in sorted(outcome.invalid.items()):
                # `http_400: <what the endpoint said>` (a rejected item), else a vector's flaw.
                rejected, _, said = reason.partition(": ")
                error_class, message = (
                    (rejected, said) if reason.startswith("http_") else ("invalid_vector", reason)
                )
                failed += state.record_failures(
                    self.connection,
                    self.generation_id,
                    claim.lease_id,
                    [claim.items[index]],
                    error_class=error_class,
                    error_message=message,
                    next_attempt_at=next_at,
                    max_attempts=max_attempts,
                    now=now,
                )
        self._unrecorded.discard(claim.lease_id)
        self.tally["succeeded"] += succeeded
        self.tally["failed"] += failed
        self.tally["batches"] += 1
        if self.progress is not None:
            self.progress.update(now, **self.tally)
        return {"succeeded": succeeded, "failed": failed}

    def should_stop(self, outcome: BatchOutcome) -> bool:
        """Count transient batch failures in a row; after MAX_FAILED_BATCHES_IN_A_ROW, set
        `stopped` (the summary's reason) and tell the loop to claim no more."""
        if outcome.error_class is None:
            self.failed_in_a_row = 0
            return False
        self.failed_in_a_row += 1
        if self.failed_in_a_row >= MAX_FAILED_BATCHES_IN_A_ROW and self.stopped is None:
            error = outcome.error_message or outcome.error_class
            self.stopped = (
                f"the embedding endpoint failed {self.failed_in_a_row} batches in a row: {error}"
            )
        return self.stopped is not None

    def release_unrecorded(self) -> int:
        """Hand this run's claimed but unrecorded items back as pending, uncharged (Ctrl-C).

        Best effort: when the connection cannot do it, the leases stay and the next run
        reclaims them as a dead owner's (charging the attempt, as after SIGKILL).
        """
        if not self._unrecorded:
            return 0
        try:
            # An interrupt between `begin` and the `try` that guards it leaves one open.
            with contextlib.suppress(duckdb.Error):
                self.connection.execute("rollback")
            released = state.release_claims(
                self.connection, self.generation_id, sorted(self._unrecorded), self.now()
            )
        except duckdb.Error:
            return 0
        self._unrecorded.clear()
        return released

    def record_interrupted(self, started: float) -> None:
        """Record an interrupted run's rate like a finished one's (best effort)."""
        with contextlib.suppress(duckdb.Error):
            state.record_run(
                self.connection,
                self.generation_id,
                self.tally["succeeded"],
                time.perf_counter() - started,
                self.now(),
            )

    def summary(self, started: float, prepared: dict[str, int]) -> dict[str, Any]:
        """Record the run's rate, then report counts by state, coverage and timings."""
        elapsed = time.perf_counter() - started
        state.record_run(
            self.connection, self.generation_id, self.tally["succeeded"], elapsed, self.now()
        )
        return {
            "generation_id": self.generation_id,
            **prepared,
            **self.tally,
            "stopped": self.stopped,
            "counts": state.state_counts(self.connection, self.generation_id),
            "next_retry_at": state.next_retry_at(self.connection, self.generation_id),
            **state.coverage(self.connection, self.generation_id),
            "elapsed_s": round(elapsed, 3),
            "model_s": round(self.model_s, 3),
            "bookkeeping_s": round(max(0.0, elapsed - self.model_s), 3),
            "docs_per_s": round(self.tally["succeeded"] / elapsed, 2) if elapsed > 0 else None,
        }


def embed_pending(
    settings: Settings,
    *,
    progress: bool = False,
    max_items: int | None = None,
    embedder: Embedder | None = None,
    now: Clock = utc_now,
    rng: random.Random | None = None,
    retry_failed: bool = False,
) -> dict[str, Any]:
    """Embed every claimable work item (or at most `max_items`) and report counts by state.

    Items whose retry time has not come yet are left for a later run rather than waited
    for, so a run always ends; it ends early, with `stopped` set in the summary, when the
    endpoint fails MAX_FAILED_BATCHES_IN_A_ROW batches in a row. `retry_failed` first makes
    the terminal_failed items pending again. `progress` draws a rich progress bar (rate,
    ETA) on stderr. On Ctrl-C the run's unrecorded claims go back uncharged, and its rate
    so far is recorded, before KeyboardInterrupt propagates.
    """
    started = time.perf_counter()
    run = EmbedRun(settings, embedder=embedder, now=now, rng=rng)
    try:
        with interrupts.as_raised():
            prepared = run.prepare(retry_failed=retry_failed)
            drive_batches(
                run,
                prepared["claimable"],
                max_items=max_items,
                progress=progress,
                claim=run.claim,
                submit=lambda claim: Done(run.embed(claim)),
                record=run.record,
            )
            return run.summary(started, prepared)
    except KeyboardInterrupt:
        run.release_unrecorded()  # drive_batches did, unless it was interrupted outside it
        run.record_interrupted(started)
        raise
    finally:
        run.close()


class Pending(Protocol):
    """A batch being embedded somewhere: this thread, a Prefect task, a Dask worker."""

    def result(self) -> BatchOutcome: ...


@dataclass(frozen=True)
class Done:
    """An outcome computed in this thread."""

    outcome: BatchOutcome

    def result(self) -> BatchOutcome:
        return self.outcome


def guided_batch_size(batch_size: int, remaining: int, in_flight: int) -> int:
    """Full batches while much is left, then shares of what remains (guided scheduling), so
    parallel workers finish together instead of one idling through another's last batch."""
    return min(batch_size, max(MIN_GUIDED_BATCH, -(-remaining // in_flight)))


def drive_batches(
    run: EmbedRun,
    claimable: int,
    *,
    max_items: int | None,
    progress: bool,
    claim: Callable[[int], state.Claim],
    submit: Callable[[state.Claim], Pending],
    record: Callable[[state.Claim, BatchOutcome], object],
    in_flight: int = 1,
    batch_size: int | None = None,
) -> None:
    """Claim, embed and record batches until nothing is claimable, `max_items` is reached
    or the endpoint failed MAX_FAILED_BATCHES_IN_A_ROW batches in a row (`run.stopped`).

    The one batch loop: the plain function passes the run's own steps, the Prefect flow
    its tasks (retries, Dask fan-out). Up to `in_flight` claimed batches are out being
    embedded at once; this process alone records them, oldest first, so the state
    database keeps one writer however many workers embed. `batch_size` defaults to the
    `embedding_batch_size` setting. Stopping early still records the batches in flight;
    a KeyboardInterrupt hands the unrecorded claims back (`EmbedRun.release_unrecorded`).
    """
    total = claimable if max_items is None else min(claimable, max_items)
    out: deque[tuple[state.Claim, Pending]] = deque()
    exhausted = False
    try:
        with interrupts.as_raised(), ProgressBar(progress, total) as advance:
            while True:
                while not exhausted and len(out) < in_flight:
                    limit = batch_size or run.settings.embedding_batch_size
                    if in_flight > 1:
                        limit = guided_batch_size(limit, total - run.tally["claimed"], in_flight)
                    if max_items is not None:
                        limit = min(limit, max_items - run.tally["claimed"])
                    batch = claim(limit) if limit > 0 else state.Claim("", ())
                    exhausted = not batch.items
                    if batch.items:
                        out.append((batch, submit(batch)))
                if not out:
                    return
                batch, pending = out.popleft()
                outcome = pending.result()
                # The crash tests' hook: die with this batch claimed and embedded, not recorded.
                crash_point(f"after_embed_batch_{run.tally['batches']}")
                record(batch, outcome)
                advance(len(batch.items))
                if run.should_stop(outcome):
                    exhausted = True
    except KeyboardInterrupt:
        run.release_unrecorded()
        raise


class ProgressBar:
    """A rich progress bar (count, rate, ETA) on stderr, or nothing when disabled."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled and total > 0
        self.total = total
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[int], None]:
        if not self.enabled:
            return lambda _count: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("embedding"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} docs/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._bar.__enter__()
        self._task = self._bar.add_task("embed", total=self.total, rate="-")
        self._started = time.perf_counter()
        self._done = 0

        def advance(count: int) -> None:
            self._done += count
            rate = self._done / max(time.perf_counter() - self._started, 1e-9)
            self._bar.update(self._task, advance=count, rate=f"{rate:.1f}")

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
