"""Imports cut off during their commit: the marker that names them, finding and undoing
what they left.

DuckDB 1.5.5 can replay part of a commit cut off while its write-ahead log was being
written: the row groups of a large insert (written to the database file before the commit)
come back, while the rest of the transaction, its `import_runs` row and its updates
included, is rolled back (duckdb/duckdb#25931). So an import names its run in a marker
beside the store, durably, before it commits, and removes it once the commit is durable;
the next one to open the store looks for rows of a run the marker names.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts.files import read_json, write_json_atomic
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError

# Tables whose rows name the run that last changed them; an import's inserts to any of them
# can outlive its cut-off commit.
RUN_TABLES = ("workspaces", "channels", "users", "messages", "files")


@dataclass(frozen=True)
class TornRun:
    """An import whose commit was cut off, leaving `rows` of its inserted rows in the store."""

    run_id: str
    source_path: str
    rows: int


def marker(path: Path) -> Path:
    """The file naming the import whose commit may be under way (run id -> input)."""
    return path.with_name(path.name + ".committing")


def mark(path: Path, run_id: str, source_path: Path) -> None:
    """Name `run_id` in the marker, durably, before its commit starts."""
    write_json_atomic(marker(path), {run_id: str(source_path.resolve())})


def clear_mark(path: Path) -> None:
    """Drop the marker once its commit is durable, or proven absent or failed."""
    marker(path).unlink(missing_ok=True)


def torn_runs(connection: duckdb.DuckDBPyConnection, path: Path) -> list[TornRun]:
    """The runs named in the marker that left rows but no `import_runs` row.

    DuckDB replays an `import_runs` row only with the whole transaction, so a run that has
    one committed whole, and one without one and without rows never committed. A torn
    commit's updates are rolled back, so every row naming it is one of its inserts.
    """
    if not marker(path).exists() or not _count(
        connection, "select count(*) from duckdb_tables() where table_name = 'import_runs'"
    ):
        return []
    torn = []
    for run_id, source_path in read_json(marker(path)).items():
        if _count(connection, "select count(*) from import_runs where run_id = ?", run_id):
            continue
        rows = sum(
            _count(connection, f"select count(*) from {table} where latest_run_id = ?", run_id)
            for table in RUN_TABLES
        )
        if rows:
            torn.append(TornRun(run_id, source_path, rows))
    return torn


def undo(path: Path) -> list[TornRun]:
    """Delete, in one transaction of their own, the rows that cut-off commits left, so the
    store is again as it was before them (a cut-off undo leaves them all to undo again)."""
    if not marker(path).exists():
        return []
    connection = open_database(str(path), what="canonical store")
    try:
        torn = torn_runs(connection, path)
        connection.begin()
        for run in torn:
            for table in RUN_TABLES:
                connection.execute(f"delete from {table} where latest_run_id = ?", [run.run_id])
        connection.commit()
    finally:
        connection.close()
    return torn


def refuse(connection: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise naming the cut-off imports whose rows the store holds, if any: every writer
    and reader of the store but the import, which undoes them, refuses such a store."""
    torn = torn_runs(connection, path)
    if not torn:
        return
    runs = "; ".join(f"run {run.run_id} of {run.source_path} ({run.rows} rows)" for run in torn)
    raise SlackqueryError(
        f"{path}: an import was cut off during its commit and left part of its rows ({runs}); "
        "run `slackquery import` on that input again: it removes them and imports it whole"
    )


def _count(connection: duckdb.DuckDBPyConnection, sql: str, *parameters: Any) -> int:
    row = connection.execute(sql, list(parameters)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
