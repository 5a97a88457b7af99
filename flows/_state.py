"""Per-process registry of open embed runs, so tasks share one state connection.

Prefect tasks receive only a run key: a DuckDB connection is neither serialisable nor
something to reopen per batch (each close checkpoints the file). The flow opens the run,
its tasks look it up here, and the flow closes it.
"""

import threading

from slackquery.embedding.work import EmbedRun

_runs: dict[str, EmbedRun] = {}
_lock = threading.Lock()


def put_run(key: str, run: EmbedRun) -> None:
    """Register an open run under `key`."""
    with _lock:
        _runs[key] = run


def get_run(key: str) -> EmbedRun:
    """The open run registered under `key`."""
    with _lock:
        return _runs[key]


def pop_run(key: str) -> EmbedRun | None:
    """Unregister and return the run under `key`, if any."""
    with _lock:
        return _runs.pop(key, None)
