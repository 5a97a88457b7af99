"""What a running embed writes beside the state database, for `embedding-status` to read.

DuckDB lets no other process open a file one process writes, so while an embed run (or a
reconcile's embed step) holds the state database, `embedding-status` cannot read it; the
run keeps this small JSON file up to date instead (after each batch it records) and
removes it when it ends. Best effort both ways: a home that cannot hold the file loses
only the report, and a file left by a killed run is ignored unless its process is the one
holding the state database.
"""

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

# The counts a run writes from its start (`EmbedRun.prepare`), which a report needs.
_COUNTS = ("claimable", "claimed", "succeeded", "failed")


def progress_path(state_path: Path) -> Path:
    """`state.duckdb.embedding-run.json`, beside the state database it reports on."""
    return state_path.with_name(f"{state_path.name}.embedding-run.json")


class RunProgress:
    """The progress file of one embed run: written whole each time, renamed into place."""

    def __init__(self, state_path: Path, generation_id: str, started_at: datetime):
        self.path = progress_path(state_path)
        self.report: dict[str, Any] = {
            "pid": os.getpid(),
            "generation_id": generation_id,
            "started_at": started_at.isoformat(),
        }

    def update(self, at: datetime, **values: Any) -> None:
        """Record `values` (counts so far) as of `at`."""
        self.report.update(values, updated_at=at.isoformat())
        aside = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with contextlib.suppress(OSError):
            aside.write_text(json.dumps(self.report), encoding="utf-8")
            os.replace(aside, self.path)

    def remove(self) -> None:
        """The run ended: nothing to report beside the state database any more."""
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


def running_embed(state_path: Path, holder_pid: int | None) -> dict[str, Any] | None:
    """The progress the embed run holding the state database last wrote, or None when the
    holder is no embed run (a projection, a build) or it has written none."""
    try:
        report = json.loads(progress_path(state_path).read_text(encoding="utf-8"))
        complete = holder_pid is not None and report["pid"] == holder_pid
        for moment in ("started_at", "updated_at"):
            datetime.fromisoformat(report[moment])
        complete &= all(isinstance(report[key], int) for key in _COUNTS)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # unreadable, or not what a run writes (another program's, a torn one)
    return report if complete else None
