"""Prefect flows `sync` and `sync-and-reconcile`: keep search current from the Slack Web API.

Reads the Slack Web API (`SLACKQUERY_SLACK_API_URL`, token `SLACKQUERY_SLACK_TOKEN`).
Writes the canonical store only, under the writer lock `import` takes, one page per
transaction with its checkpoint (`slackquery.canonical.sync_store`). Safe to re-run at any
point, including after a SIGKILL: the next run resumes every conversation from its last
commit, and a run that finds the lock held (an import, or a sync still going), or the store
open in another process past the writer's wait (a `project` reading it), is skipped.
`sync-and-reconcile` then runs the `reconcile` flow, so the deployment that calls it
every 15 minutes publishes what the sync brought in.

Retries: a sync that gave up on rate limits (429, `ratelimited`), server errors (5xx,
Slack's transient `ok: false` errors) or timeouts is retried (it resumes, so a retry costs
only the page in flight); token, scope, malformed-page and input errors fail at once.
"""

import logging
from datetime import date
from typing import Any

from prefect import Task, flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.exceptions import MissingContextError
from prefect.states import State

from flows.embed import Pace
from flows.reconcile import reconcile
from slackquery.canonical.store import StoreBusy
from slackquery.duckdb_setup import BusyDatabase
from slackquery.settings import get_settings
from slackquery.slack.client import SlackTransientError
from slackquery.slack.sync import CONVERSATION_TYPES, Progress, SyncRequest, sync


def retry_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry a sync that gave up on rate limits, server errors or timeouts; nothing else."""
    try:
        state.result()
    except SlackTransientError:
        return True
    except Exception:
        return False
    return False


def _logger() -> logging.Logger | logging.LoggerAdapter:
    """The run's logger inside Prefect, a plain one when a task body runs bare (`.fn()`)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("slackquery.sync")


def logged_progress(
    logger: logging.Logger | logging.LoggerAdapter, pace: Pace | None = None
) -> Progress:
    """A sync's progress as a log line when `pace` says one is due: conversations done of
    those listed, pages written, and the least time left at this pace (a deployed sync has
    no bar, and a paced one runs for minutes, a big channel for hours)."""
    pace = pace or Pace()

    def update(done: int, total: int, eta_s: float, pages: int) -> None:
        if pace.due():
            logger.info(
                "synced %d of %d conversations (%d pages); at least %.0f min left at this pace",
                done,
                total,
                pages,
                eta_s / 60,
            )

    return Progress(update)


@task(
    cache_policy=NO_CACHE,
    persist_result=False,
    retries=3,
    retry_delay_seconds=[60, 300, 900],
    retry_condition_fn=retry_transient,
)
def sync_workspace(
    types: list[str], channels: list[str], since: date | None, max_minutes: float | None = None
) -> dict[str, Any]:
    """One sync run; `{"status": "skipped"}` when another writer holds the store, or another
    process has it open (the next scheduled run goes on)."""
    request = SyncRequest(
        types=tuple(types), channels=tuple(channels), since=since, max_minutes=max_minutes
    )
    try:
        result = sync(get_settings(), request, progress=logged_progress(_logger()))
    except (StoreBusy, BusyDatabase) as error:
        _logger().warning("%s; skipping this run", error)
        return {"status": "skipped", "reason": str(error)}
    _logger().info(
        "synced %s conversations with %s requests: %s",
        result["conversations"],
        result["request_count"],
        result["counts"]["messages"],
    )
    if result["deferred"]:
        _logger().info(
            "%s conversations deferred to the next run (max_minutes %s)",
            len(result["deferred"]),
            max_minutes,
        )
    if result["revoked"]:
        _logger().warning(
            "private conversations this token can no longer read, members emptied: %s",
            ", ".join(item["channel_id"] for item in result["revoked"]),
        )
    return {"status": "synced", **result}


@flow(name="sync", log_prints=False)
def sync_flow(
    types: list[str] | None = None,
    channels: list[str] | None = None,
    since: date | None = None,
    max_minutes: float | None = None,
) -> dict[str, Any]:
    """Bring the canonical store up to date from the Slack Web API, once; with
    `max_minutes`, stop after that long, between two pages (the next run goes on); with
    `since` (an ISO date), read no history before that day (`slackquery sync --since`)."""
    return sync_workspace(
        list(types or CONVERSATION_TYPES), list(channels or []), since, max_minutes
    )


@flow(name="sync-and-reconcile", log_prints=False)
def sync_and_reconcile(
    types: list[str] | None = None,
    channels: list[str] | None = None,
    full_refresh: bool = False,
    dask_workers: int | None = None,
    dask_address: str | None = None,
    max_minutes: float | None = None,
    since: date | None = None,
) -> dict[str, Any]:
    """Sync, then reconcile (project, embed, build, validate, publish) what it brought in;
    `max_minutes` and `since` are sync's (stop after that long, between two pages, so the
    schedule keeps its pace, the next run goes on; read no history before that day, an ISO
    date such as `2024-03-31`, like `slackquery sync --since`: after an import, the
    export's last day), `dask_workers` / `dask_address` are reconcile's (its embed step's
    batches on Dask)."""
    synced = sync_workspace(
        list(types or CONVERSATION_TYPES), list(channels or []), since, max_minutes
    )
    reconciled = reconcile(
        full_refresh=full_refresh, dask_workers=dask_workers, dask_address=dask_address
    )
    return {"sync": synced, "reconcile": reconciled}
