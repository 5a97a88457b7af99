"""Install DuckDB's FTS extension from its PyPI package, so nothing downloads at run time.

`import_extension` copies the packaged extension into the user's DuckDB extension folder;
after that `INSTALL fts` is a no-op and `LOAD fts` works offline (dbt-duckdb's
`extensions:` profile setting included). `make setup` runs this module once.

Every pipeline database (state, artifacts) opens through `open_database`, so a file another
process holds or one that is not a DuckDB database is the same one-line error everywhere;
a damaged file (not a database, cut short, a block whose checksum fails) raises
`DamagedDatabase`, so the owner of a file can say how to move off it.
"""

import re
import time
from pathlib import Path
from typing import NoReturn

import duckdb
from duckdb_extensions import import_extension

from slackquery.errors import SlackqueryError

EXTENSIONS = ("fts",)
# How DuckDB's IOException names the process holding a file's lock.
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in .* \(PID (\d+)\)")
# How DuckDB's IOException says a file's bytes are not a database it can read: not one at
# all, shorter than its own blocks say (`Could not read enough bytes from file "<path>"`),
# or a block whose checksum fails; on open or on the first query that reads the block.
_NOT_A_DATABASE = "not a valid DuckDB database file"
_DAMAGE = re.compile(r"Corrupt database file|Could not read enough bytes")
_QUOTED_FILE = re.compile(r' from file "[^"]*"')
_CHECKSUM = re.compile(r"computed checksum \d+ does not match stored checksum \d+ in block")
_LOCKED = "Could not set lock"
# How long a writer waits for a file another process has open before it gives up: the
# readers (`embedding-status`, `artifacts`, a reconcile's plan) hold one for under a second,
# and a scheduled run should not fail on one. A reader never waits: a writer holds a file
# for minutes. Module attributes, so tests replace the clock and the sleep.
WRITER_LOCK_WAIT_S = 30.0
_clock = time.monotonic
_sleep = time.sleep


class DamagedDatabase(SlackqueryError):
    """A database file whose bytes DuckDB cannot read; `detail` says what it found."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def damage_of(error: BaseException) -> str | None:
    """What DuckDB found wrong with a damaged file's bytes, short and on one line, without
    the file's path (`Corrupt database file: checksum mismatch in block at location …`);
    None when `error` says something else."""
    if not isinstance(error, duckdb.IOException):
        return None
    detail = " ".join(str(error).split()).removeprefix("IO Error: ")
    if _NOT_A_DATABASE in detail:
        return _NOT_A_DATABASE
    if not _DAMAGE.search(detail):
        return None
    return _CHECKSUM.sub("checksum mismatch in block", _QUOTED_FILE.sub("", detail))


def install_extensions() -> None:
    """Copy every extension the project needs into DuckDB's extension folder."""
    for name in EXTENSIONS:
        import_extension(name)


class BusyDatabase(SlackqueryError):
    """Another process has the file open; `holder_pid` names it when DuckDB says."""

    def __init__(self, message: str, holder_pid: int | None):
        super().__init__(message)
        self.holder_pid = holder_pid


def _open_failure(what: str, path: str, detail: str) -> str:
    """The one line saying why DuckDB could not open `path` (its IOException `detail`)."""
    if _LOCKED in detail:
        # DuckDB lets one process write a file and no other open it meanwhile.
        holder = _LOCK_HOLDER.search(detail)
        by = f" (PID {holder[1]})" if holder else ""
        return f"{what} {path} is busy: another process{by} has it open; retry when it is done"
    if _NOT_A_DATABASE in detail:
        return f"{what} {path} is not a valid DuckDB database file"
    return f"cannot open {what} {path}: {detail.removeprefix('IO Error: ')}"


def wal_file(database: Path) -> Path:
    """The write-ahead log DuckDB keeps beside `database`: part of its content until the
    next checkpoint."""
    return database.with_name(database.name + ".wal")


def open_database(
    path: str, *, read_only: bool = False, what: str = "database"
) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect`; a file DuckDB cannot open is a SlackqueryError naming `what`
    (`DamagedDatabase` when its bytes are damaged). To write, it waits up to
    `WRITER_LOCK_WAIT_S` for a file another process has open."""
    deadline = _clock() + (0.0 if read_only else WRITER_LOCK_WAIT_S)
    delay = 0.05
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as error:
            if _LOCKED not in str(error) or _clock() + delay > deadline:
                _raise_open_failure(what, path, error)
        _sleep(delay)
        delay = min(delay * 2, 1.0)


def _raise_open_failure(what: str, path: str, error: duckdb.IOException) -> NoReturn:
    """Raise the SlackqueryError (or DamagedDatabase) for a file DuckDB could not open."""
    detail = str(error)
    message = _open_failure(what, path, detail)
    if _LOCKED in detail:
        holder = _LOCK_HOLDER.search(detail)
        raise BusyDatabase(message, int(holder[1]) if holder else None) from error
    damage = damage_of(error)
    if damage is not None:
        raise DamagedDatabase(message, damage) from error
    raise SlackqueryError(message) from error


def connect(
    path: str = ":memory:", *, read_only: bool = False, what: str = "database"
) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB connection (`open_database`) with the project's extensions loaded.

    Only for connections that call the FTS index's macros (`match_bm25`, `tokenize`: they
    call the extension's `stem`); reading the index's tables, or any other, needs no
    extension. Loading it costs 30-80 ms a connection on a 2-core machine, more than
    opening the file, and builds, publishes and plans open several.
    """
    connection = open_database(path, read_only=read_only, what=what)
    for name in EXTENSIONS:
        try:
            connection.execute(f"load {name}")
        except duckdb.IOException:
            install_extensions()
            connection.execute(f"load {name}")
    return connection


if __name__ == "__main__":
    install_extensions()
    print("duckdb extensions installed: " + ", ".join(EXTENSIONS))
