"""Prefect flow `embed`: vectors for every active message document, resumable after any crash.

Reads `search_documents` (active messages and their `text_embedding` / `text_hash`) from the
state DuckDB; writes `embedding_generations` and `embedding_work_items` there (contract:
docs/architecture.md). Each batch is claimed under a lease and its outcome committed at
once, so re-running is always safe: an unchanged corpus enqueues nothing, succeeded items
are never claimed again, and a killed run's leases are reclaimed (at expiry, or at once
when the owning process is gone).

Fan-out: `embed_batch` runs wherever the flow's task runner puts it: threads of this process
by default, or Dask workers (`with_dask()`: a LocalCluster of N workers, or the scheduler of a
real cluster), in batches of `embedding_dask_batch_size` documents (512: a task's
scheduling and task-run bookkeeping stay a small share of it; the last batches shrink so
the workers finish together). Workers only compute vectors
and return them; this process claims, records and holds the only connection to the state
database (one writer per DuckDB file). Each
worker unpickles the embedder into its own process-wide copy, so it loads the model once,
all workers at once before the first claim (`warm_workers`).
A killed worker's task is re-run by Dask on another worker; a killed flow leaves leases
that the next run releases, since their owner process is gone. A run with nothing to claim
never contacts Dask, and a scheduler address is checked (`ensure_dask_scheduler`, bounded)
before the task runner connects: Dask's own handshake waits forever on a service that
accepts the connection and never answers as Dask does.

Project decision (STYLE §9): the state DB, not Prefect results or caching, is the source of
truth, so tasks neither cache nor persist results. Prefect retries the embedding request
for transient faults inside a run; the work-item rows carry retries across runs.
"""

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import Flow, flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.context import FlowRunContext
from prefect.settings import PREFECT_API_URL
from prefect.states import State
from prefect.tasks import Task

from flows._state import get_run, pop_run, put_run
from slackquery.embedding.base import Embedder, ensure_same_generation
from slackquery.embedding.errors import TransientEmbeddingError
from slackquery.embedding.state import Claim
from slackquery.embedding.work import BatchOutcome, EmbedRun, drive_batches, embed_texts, utc_now
from slackquery.errors import SlackqueryError
from slackquery.retry_after import parse_retry_after
from slackquery.settings import Settings, get_settings

# A Retry-After longer than this is not waited out inside the run: the items are recorded
# as retryable_failed with that retry time and a later run picks them up.
MAX_IN_RUN_WAIT_S = 30.0
# Batches out per Dask worker thread: one being embedded, one queued behind it, so a
# worker never waits for this process to record and claim.
BATCHES_PER_WORKER_THREAD = 2
# A scheduler answers its handshake in milliseconds; this bounds a wrong address (the
# dashboard's HTTP port, any other service), where Dask's own handshake never times out.
DASK_CONNECT_TIMEOUT_S = 10.0
HANDSHAKE_GRACE_S = 1.0
# A deployed run has no progress bar: its log says how far it is, at most once a minute
# (the sync flow's too).
PROGRESS_LOG_EVERY_S = 60.0


class Pace:
    """When a deployed run's next progress line is due: at most once every `every_s`
    seconds from its start (a shorter run logs none)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, every_s: float = PROGRESS_LOG_EVERY_S
    ):
        self.clock, self.every_s = clock, every_s
        self.started = self.logged = clock()

    def due(self) -> bool:
        """Whether a line is due now; if so, the next one is `every_s` from now."""
        now = self.clock()
        if now - self.logged < self.every_s:
            return False
        self.logged = now
        return True


class ProgressLog:
    """Records a run's batches, then logs the items done of those claimable, the rate and
    the time left when its `Pace` says a line is due."""

    def __init__(self, logger: Any, run: EmbedRun, total: int, pace: Pace | None = None):
        self.logger, self.run, self.total = logger, run, total
        self.pace = pace or Pace()

    def record(self, claim: Claim, outcome: BatchOutcome) -> dict[str, int]:
        """`EmbedRun.record`, then the progress line when it is due."""
        recorded = self.run.record(claim, outcome)
        if self.pace.due():
            tally = self.run.tally
            done = tally["succeeded"] + tally["failed"]
            rate = tally["succeeded"] / (self.pace.logged - self.pace.started)
            left = f"about {(self.total - done) / rate / 60:.0f} min left" if rate else "stalled"
            self.logger.info(
                "embedded %d of %d items (%d failed); %.1f docs/s; %s",
                done,
                self.total,
                tally["failed"],
                rate,
                left,
            )
        return recorded


def retry_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only transient faults (network, timeout, 429, 5xx) with a short Retry-After."""
    try:
        state.result()
    except TransientEmbeddingError as error:
        delay = parse_retry_after(error.retry_after, utc_now())
        return delay is None or delay <= MAX_IN_RUN_WAIT_S
    except Exception:
        return False
    return False


@task(cache_policy=NO_CACHE, persist_result=False)
def enqueue(run_key: str, retry_failed: bool = False) -> dict[str, int]:
    """Register the generation, release dead leases and enqueue new or changed documents;
    with `retry_failed`, make the terminal_failed items pending again."""
    return get_run(run_key).prepare(retry_failed=retry_failed)


@task(
    cache_policy=NO_CACHE,
    persist_result=False,
    retries=2,
    retry_delay_seconds=[2, 10],
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient,
)
def embed_batch(embedder: Embedder, generation_id: str, texts: list[str]) -> BatchOutcome:
    """Embed one batch (here or on a Dask worker); raises TransientEmbeddingError so Prefect
    can retry it, and refuses a worker whose model is another generation than the flow's."""
    ensure_same_generation(embedder.identity, generation_id)
    outcome = embed_texts(embedder, texts)
    if outcome.error_class is not None:
        raise TransientEmbeddingError(
            outcome.error_class, outcome.error_message or "", outcome.retry_after
        )
    return outcome


class _Submitted:
    """An `embed_batch` future whose transient failure, once retries are spent, becomes a
    failed outcome (recorded as retryable) instead of failing the run."""

    def __init__(self, future: Any, logger: Any):
        self._future, self._logger = future, logger

    def result(self) -> BatchOutcome:
        try:
            return self._future.result()
        except TransientEmbeddingError as error:
            self._logger.warning("batch failed after retries: %s", error)
            return BatchOutcome(
                error_class=error.error_class,
                error_message=str(error),
                retry_after=error.retry_after,
            )


def ensure_dask_scheduler(address: str, timeout_s: float | None = None) -> None:
    """Refuse, in one line, an address where no Dask scheduler answers within `timeout_s`
    (DASK_CONNECT_TIMEOUT_S): nothing listening, a host that drops packets, or another
    service (an HTTP server, a Dask worker) that accepts the connection."""
    timeout = DASK_CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    reason = _tcp_refusal(address, timeout) or _not_a_scheduler(address, timeout)
    if reason is not None:
        raise SlackqueryError(f"cannot reach the Dask scheduler at {address}: {reason}")


def _tcp_refusal(address: str, timeout: float) -> str | None:
    """Why a plain connection to the address's host and port fails, or None. It comes
    first because Dask's own connect retries a refused port for its whole timeout."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as error:
        return str(error)
    if scheme not in ("tcp", "tls", "ws", "wss"):  # not over TCP: Dask's connect decides
        return None
    try:
        socket.create_connection((host, port), timeout).close()
    except OSError as error:
        reason = error.strerror or str(error)
        return reason[:1].lower() + reason[1:]
    return None


def _not_a_scheduler(address: str, timeout: float) -> str | None:
    """Why no Dask scheduler answers the identity handshake at `address`, or None."""
    from distributed.comm import connect
    from distributed.security import Security

    async def identify() -> Any:
        # The client's own connection arguments (TLS from the Dask config, as `Client`).
        args = Security().get_connection_args("client")
        comm = await connect(address, timeout=timeout, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            await comm.close()

    # The outer bound also covers the handshake, which has no timeout of its own.
    bound = timeout + HANDSHAKE_GRACE_S
    try:
        # A thread of its own: asyncio.run refuses a thread whose event loop is running.
        with ThreadPoolExecutor(1) as pool:
            info = pool.submit(asyncio.run, asyncio.wait_for(identify(), bound)).result()
    except TimeoutError:
        return f"no Dask handshake within {bound:g} s (is it a Dask scheduler's port?)"
    # Whatever a non-Dask peer makes the protocol raise (closed stream, undecodable
    # frames, an unknown scheme) means the same to the user: no scheduler there.
    except Exception as error:
        return _why_no_handshake(error)
    kind = info.get("type") if isinstance(info, dict) else None
    if isinstance(kind, str) and "Scheduler" in kind:
        return None
    return f"it answers as a Dask {kind}, not a scheduler" if kind else "not as Dask"


def _why_no_handshake(error: BaseException) -> str:
    """Why Dask could not connect, in one line: the OS's reason (`connection refused`)
    when its chain of wrapped errors holds one. Else a peer that is no scheduler made the
    protocol raise, and its message says nothing useful (a web server's `HTTP/1.1 400`
    read as a frame length is "Unable to allocate 3.07 EiB")."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror[:1].lower() + cause.strerror[1:]
        cause = cause.__cause__
    return f"no Dask handshake ({type(error).__name__}; is it a Dask scheduler's port?)"


def _dask_client() -> Any | None:
    """The Dask client of the running flow's task runner (None: threads of this process),
    connecting it on first use; a scheduler address is checked first."""
    context = FlowRunContext.get()
    runner = context.task_runner if context else None
    if not hasattr(type(runner), "client"):  # on the class: the property would connect
        return None
    address = getattr(runner, "address", None)
    if address:
        ensure_dask_scheduler(address)
    return runner.client


def _batch_size(settings: Settings, client: Any | None) -> int:
    """Documents per `embed_batch` task: larger on Dask, where each task also pays its
    scheduling and Prefect's task-run bookkeeping on the worker."""
    if client is None:
        return settings.embedding_batch_size
    return settings.embedding_dask_batch_size


def _load_on_worker(embedder: Embedder, generation_id: str) -> None:
    """Runs on each Dask worker: unpickling `embedder` loads the worker's model; one short
    text proves it embeds, and a worker of another generation is refused before any claim."""
    ensure_same_generation(embedder.identity, generation_id)
    embedder.embed_documents(["warm-up"])


def warm_workers(client: Any | None, embedder: Embedder, generation_id: str) -> None:
    """Load the model on all Dask workers at once, before any batch is claimed (nothing on
    the default runner). Workers that join later load it lazily."""
    if client is not None:
        client.run(_load_on_worker, embedder, generation_id)


def _batches_in_flight(client: Any | None) -> int:
    """1 on the default runner; on Dask, enough batches to keep every worker thread busy."""
    if client is None:
        return 1
    return BATCHES_PER_WORKER_THREAD * max(1, sum(client.nthreads().values()))


@flow(name="embed", log_prints=False)
def embed_flow(
    max_items: int | None = None, progress: bool = False, retry_failed: bool = False
) -> dict[str, Any]:
    """Embed all claimable work items of the configured generation; return counts by state
    (`stopped` says why a run ended early). `retry_failed` first makes the terminal_failed
    items pending again.

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
        prepared = enqueue(run_key, retry_failed)
        if not prepared["claimable"]:  # nothing to do: Dask is not even contacted
            logger.info("generation %s: %s; nothing to claim", run.generation_id, prepared)
            return {**run.summary(started, prepared), "worker_warm_up_s": 0.0}
        warm_up = time.perf_counter()
        client = _dask_client()  # a LocalCluster's workers start on its first use
        warm_workers(client, run.embedder, run.generation_id)
        warm_up_s = time.perf_counter() - warm_up if client is not None else 0.0
        in_flight = _batches_in_flight(client)
        logger.info("generation %s: %s; %d in flight", run.generation_id, prepared, in_flight)

        def submit(claim: Claim) -> _Submitted:
            texts = [item.text for item in claim.items]
            future = embed_batch.submit(run.embedder, run.generation_id, texts)
            return _Submitted(future, logger)

        # Claiming and recording are plain calls on the flow's one state connection, not
        # tasks: each task run costs API writes here and in the API server, per batch, on
        # the cores the Dask workers embed on.
        drive_batches(
            run,
            prepared["claimable"],
            max_items=max_items,
            progress=progress,
            claim=run.claim,
            submit=submit,
            record=ProgressLog(logger, run, prepared["claimable"]).record,
            in_flight=in_flight,
            batch_size=_batch_size(settings, client),
        )
        summary = {**run.summary(started, prepared), "worker_warm_up_s": round(warm_up_s, 3)}
        if summary["stopped"]:
            logger.warning("embed stopped early: %s", summary["stopped"])
        logger.info("embed finished: %s", summary["counts"])
        rejected = summary["counts"]["terminal_failed"]
        if rejected:
            logger.warning(
                "%d items the endpoint rejected for good (terminal_failed) are searchable by "
                "their words only; `slackquery embed --retry-failed` tries them again",
                rejected,
            )
        return summary
    finally:
        finished = pop_run(run_key)
        if finished is not None:
            finished.close()


def with_dask(workers: int | None = None, address: str | None = None) -> Flow[..., dict[str, Any]]:
    """`embed_flow` with its batches on Dask: the scheduler at `address` (a real cluster), or
    a LocalCluster of `workers` single-threaded worker processes; unchanged when neither."""
    if workers is not None and workers < 1:  # a deployment's parameter; the CLI checks its own
        raise SlackqueryError(f"dask_workers must be at least 1, not {workers}")
    if not address and not workers:
        return embed_flow
    from prefect_dask import DaskTaskRunner

    if address:
        runner = DaskTaskRunner(address=address)
    else:
        # The scheduler and nannies run in this process: their ~50 INFO lines a run (start,
        # connections, shutdown) buried the run's own; their warnings still show.
        logging.getLogger("distributed").setLevel(logging.WARNING)
        runner = DaskTaskRunner(
            cluster_class="distributed.LocalCluster",
            cluster_kwargs={
                "n_workers": workers,
                "threads_per_worker": 1,
                "processes": True,
                # The scheduler always serves /health and /metrics; None means port 8787,
                # which a second cluster on the machine finds taken (and warns).
                "dashboard_address": "127.0.0.1:0",
                # Each worker reports its task runs to the flow's API. Without one in its
                # environment a worker started a temporary Prefect server of its own:
                # ~15 s before its first batch, its runs recorded apart from the flow's.
                "env": {"PREFECT_API_URL": flow_api_url()},
            },
        )
    return embed_flow.with_options(task_runner=runner)


def flow_api_url() -> str:
    """The Prefect API this process's flow runs report to: the configured one, or else the
    temporary server Prefect starts for them, started here so that its address is known
    (Prefect keeps one per process and stops it at exit)."""
    configured = PREFECT_API_URL.value()
    if configured:
        return str(configured)
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url
