"""Project the canonical store into search documents by running the dbt project in-process.

The SQL lives in models/ (analytics engineers own it); this module only prepares the
run: it checks the canonical store is there and speaks its schema version, points the dbt
profile at the settings' paths through the environment variables profiles.yml reads,
keeps dbt's target and log folders under SLACKQUERY_HOME (never in the working tree),
runs `dbt build` (models and their tests), and reports document counts afterwards.

Each projection is recorded in the state DB's `projection_runs` with the fingerprint of
the SQL it ran. The incremental models only notice changed *inputs*, so a projection whose
SQL differs from the last one's, or that follows one that did not finish cleanly (a failed
test leaves the tables it already wrote), rebuilds them from canonical; and `build`
refuses a state whose last projection did not succeed.
"""

import functools
import hashlib
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import yaml

from slackquery import interrupts
from slackquery.canonical import torn_commits
from slackquery.crash import crash_point
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.settings import Settings

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROFILES_DIR = PROJECT_DIR / "profiles"
DOCUMENT_KINDS = ("message", "thread_context")
# What dbt compiles: a change to any of it changes what the models would write.
PROJECT_SOURCES = ("dbt_project.yml", "models", "macros", "data-tests")
PROJECTION_RUNS_DDL = """
create table if not exists projection_runs (
    started_at timestamptz not null,
    fingerprint varchar not null,  -- sha256 of PROJECT_SOURCES
    outcome varchar not null,      -- running (until it ends: a killed run stays so), succeeded,
                                   -- failed
    failure varchar                -- the one-line error of a failed run
);
-- The dbt invocation that wrote the state last when the run ended (the project's
-- on-run-end hook, record_dbt_invocation, lists them in dbt_invocations).
alter table projection_runs add column if not exists dbt_invocation_id varchar;
-- Whether it ran the data tests (false: --skip-tests); null in an older version's rows.
alter table projection_runs add column if not exists tested boolean;
"""
logger = logging.getLogger(__name__)
DOCUMENTS_TABLE = "search_documents"
# What dbt says when an incremental model's columns differ from the table it would extend.
SCHEMA_DRIFT = "schemas on this incremental model are out of sync"


def project(
    settings: Settings,
    *,
    full_refresh: bool = False,
    progress: bool = False,
    tests: bool = True,
    unit_tests: bool = False,
) -> dict:
    """Run `dbt build` against settings' canonical and state DBs; return document counts.

    Incremental by default: only documents whose canonical inputs changed are rewritten.
    `full_refresh` rebuilds every incremental model from scratch (same output).
    The dbt data tests run with the models; `tests=False` runs the models only (`dbt run`),
    for repeated runs whose SQL and tests already passed once, e.g. benchmarks.
    `unit_tests` adds the models' unit tests: they check SQL against fixed inputs, not
    the data, so they belong to development and CI (`make test` runs them), as dbt advises.
    Raises SlackqueryError when the canonical DB is missing or of the wrong schema
    version, or when a dbt node fails (the message names the node).
    """
    canonical = settings.canonical_path
    check_canonical(canonical)
    state = settings.state_path
    make_folder(state.parent)
    fingerprint = project_fingerprint()
    refresh_reason = "requested" if full_refresh else _refresh_reason(state, fingerprint)
    if refresh_reason != "requested" and refresh_reason is not None:
        logger.warning("rebuilding the search models: %s", refresh_reason)
        # dbt's partial parse goes by file times, which a restored or other checkout
        # may not change: parse afresh whenever the SQL is not the last run's.
        (settings.home / "dbt" / "target" / "partial_parse.msgpack").unlink(missing_ok=True)
    args = ["build" if tests else "run", "--target", "state"]
    if tests and not unit_tests:
        args += ["--exclude-resource-type", "unit_test"]
    if refresh_reason is not None:
        args.append("--full-refresh")
    started = time.perf_counter()
    environment = {
        "SLACKQUERY_CANONICAL_DB": str(canonical.resolve()),
        "SLACKQUERY_STATE_DB": str(state.resolve()),
    }
    recorded_at = _record_start(state, fingerprint, tested=tests)
    try:
        try:
            result = run_dbt(
                settings, args, environment=environment, target_subdir="target", progress=progress
            )
        except SlackqueryError as error:
            # A state projected by an older version whose incremental models lack a column
            # this version adds: rebuilding them from canonical gives the same rows an
            # incremental run would have, and vectors live outside the models, so nothing
            # is re-embedded.
            if refresh_reason is not None or SCHEMA_DRIFT not in str(error):
                raise
            refresh_reason = "the search models predate this version's columns"
            logger.warning("rebuilding the search models: %s", refresh_reason)
            args.append("--full-refresh")
            result = run_dbt(
                settings, args, environment=environment, target_subdir="target", progress=progress
            )
    except SlackqueryError as error:
        _record_end(state, recorded_at, failure=str(error))
        raise
    _record_end(state, recorded_at, failure=None)
    counts = document_counts(state)
    counts["dbt_nodes"] = dict(Counter(str(node.node.resource_type) for node in result.results))
    counts["test_warnings"] = warned_tests(result)
    counts["full_refresh"] = refresh_reason is not None
    counts["full_refresh_reason"] = refresh_reason
    counts["elapsed_s"] = round(time.perf_counter() - started, 3)
    counts["state_db"] = str(state)
    return counts


def warned_tests(result: Any) -> list[dict[str, str]]:
    """The data tests that failed at severity `warn`: dbt passes the run, and said so only
    in its log. Each with its message and the query that lists its rows."""
    return [
        {
            "test": node_result.node.unique_id,
            "message": _one_line(str(node_result.message)),
            "query": str(node_result.node.compiled_path),
        }
        for node_result in result.results
        if str(node_result.status) == "warn"
    ]


def project_fingerprint() -> str:
    """sha256 of the dbt project's sources (`PROJECT_SOURCES`), paths and contents."""
    digest = hashlib.sha256()
    for source in PROJECT_SOURCES:
        root = PROJECT_DIR / source
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            relative = path.relative_to(PROJECT_DIR)
            if path.is_file() and not any(part.startswith(".") for part in relative.parts):
                digest.update(f"{relative}\0".encode())
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()


def last_projection(state: Path) -> tuple[str, str, str | None] | None:
    """(fingerprint, outcome, failure) of the state's latest projection, None if none."""
    if not state.exists():
        return None
    connection = open_database(str(state), read_only=True, what="state database")
    try:
        return latest_projection(connection)
    finally:
        connection.close()


def latest_projection(state: duckdb.DuckDBPyConnection) -> tuple[str, str, str | None] | None:
    """`last_projection` over an open connection to the state database."""
    return _newest(state, "projection_runs", "fingerprint, outcome, failure", "started_at")


def _newest(state: duckdb.DuckDBPyConnection, table: str, columns: str, by: str) -> Any:
    """`columns` of the newest row of `table` by `by`, or None where it has none, or where
    no run of this version made the table."""
    try:
        return state.execute(f"select {columns} from {table} order by {by} desc limit 1").fetchone()
    except duckdb.CatalogException:
        return None


def _refresh_reason(state: Path, fingerprint: str) -> str | None:
    """Why this projection must rebuild the incremental models, or None."""
    if not state.exists():
        return None
    connection = open_database(str(state), read_only=True, what="state database")
    try:
        last = latest_projection(connection)
        outside = unrecorded_dbt_run(connection)
    finally:
        connection.close()
    if last is None:
        return "no projection of this version recorded yet"
    last_fingerprint, outcome, _ = last
    if outcome != "succeeded":
        return f"the last projection {'did not finish' if outcome == 'running' else 'failed'}"
    if last_fingerprint != fingerprint:
        return "the models changed since the last projection"
    return None if outside is None else f"{outside} wrote the state since the last projection"


def tests_passed(state: duckdb.DuckDBPyConnection, fingerprint: str) -> bool:
    """Whether the newest projection of these models that ran their data tests succeeded
    in this state: `--skip-tests` repeats a tested projection, it does not pass over one
    whose tests failed since (new data a test refuses)."""
    try:
        newest = state.execute(
            "select outcome from projection_runs where fingerprint = ? and tested "
            "order by started_at desc limit 1",
            [fingerprint],
        ).fetchone()
    except duckdb.BinderException:  # no projection of this version recorded `tested`
        return False
    return newest is not None and newest[0] == "succeeded"


def unrecorded_dbt_run(state: duckdb.DuckDBPyConnection) -> str | None:
    """The newest dbt run that wrote the state, said in words, when it is not the one the
    last projection recorded: one `slackquery project` did not start (a model tried out by
    hand with `dbt build`, then undone), whose rows incremental runs would keep. None
    when the last projection's run is the newest, or no run recorded itself."""
    newest = _newest_dbt_invocation(state)
    if newest is None:
        return None
    try:
        recorded = state.execute(
            "select dbt_invocation_id from projection_runs order by started_at desc limit 1"
        ).fetchone()
    except (duckdb.CatalogException, duckdb.BinderException):  # no projection of this version
        recorded = None
    invocation_id, command, started_at = newest
    if recorded is not None and recorded[0] == invocation_id:
        return None
    started = started_at.astimezone(UTC)
    return (
        f"a `dbt {command}` that `slackquery project` did not start ({started:%Y-%m-%d %H:%M} UTC)"
    )


def _newest_dbt_invocation(state: duckdb.DuckDBPyConnection) -> tuple[str, str, datetime] | None:
    """(invocation id, command, start) of the newest dbt run that wrote the state (the
    on-run-end hook, `record_dbt_invocation`), or None."""
    return _newest(
        state, "dbt_invocations", "invocation_id, command, run_started_at", "run_started_at"
    )


def _record_start(state: Path, fingerprint: str, *, tested: bool) -> datetime:
    """Record a projection as running (what a killed one stays); the row's start time."""
    started_at = datetime.now(UTC)
    connection = open_database(str(state), what="state database")
    try:
        connection.execute(PROJECTION_RUNS_DDL)
        connection.execute(
            "insert into projection_runs (started_at, fingerprint, outcome, tested) "
            "values (?, ?, 'running', ?)",
            [started_at, fingerprint, tested],
        )
    finally:
        connection.close()
    return started_at


def _record_end(state: Path, started_at: datetime, *, failure: str | None) -> None:
    """Record how the projection that started at `started_at` ended, and the dbt run that
    wrote the state last: its own (nothing else can write the state while it runs)."""
    connection = open_database(str(state), what="state database")
    try:
        newest = _newest_dbt_invocation(connection)  # None: it failed before any model ran
        connection.execute(
            "update projection_runs set outcome = ?, failure = ?, dbt_invocation_id = ? "
            "where started_at = ?",
            ["failed" if failure else "succeeded", failure, newest and newest[0], started_at],
        )
    finally:
        connection.close()


def check_canonical(path: Path) -> None:
    """Refuse to project from a missing canonical DB, one of another schema version, or
    one holding part of a cut-off import (`torn_commits.refuse`)."""
    if not path.is_file():
        raise SlackqueryError(f"canonical database not found: {path} (run `slackquery import`)")
    connection = open_database(str(path), read_only=True, what="canonical store")
    try:
        version = connection.execute("select max(schema_version) from schema_metadata").fetchone()
        torn_commits.refuse(connection, path)
    except duckdb.CatalogException as error:
        raise SlackqueryError(f"{path} is not a canonical database (no schema_metadata)") from error
    finally:
        connection.close()
    if version is None or version[0] != CANONICAL_SCHEMA_VERSION:
        found = None if version is None else version[0]
        raise SlackqueryError(
            f"canonical database {path} has schema version {found}; "
            f"projection needs {CANONICAL_SCHEMA_VERSION}"
        )


def document_counts(state: Path) -> dict:
    """Counts of search documents per kind and state (active / tombstoned) in the state DB."""
    connection = duckdb.connect(str(state), read_only=True)
    try:
        rows = connection.execute(
            f"select document_kind, is_active, count(*) from {DOCUMENTS_TABLE} group by all"
        ).fetchall()
    finally:
        connection.close()
    documents: dict[str, dict[str, int]] = {
        kind: {"active": 0, "tombstoned": 0} for kind in DOCUMENT_KINDS
    }
    for kind, is_active, count in rows:
        documents.setdefault(kind, {"active": 0, "tombstoned": 0})
        documents[kind]["active" if is_active else "tombstoned"] += count
    total = sum(sum(states.values()) for states in documents.values())
    return {"documents": documents, "total": total}


@functools.cache
def project_vars() -> dict[str, Any]:
    """The dbt project's vars (dbt_project.yml), the one home of the values dbt and the
    Python code share: dbt cannot import Python, so Python reads dbt's."""
    with (PROJECT_DIR / "dbt_project.yml").open(encoding="utf-8") as handle:
        return dict(yaml.safe_load(handle)["vars"])


def fts_config() -> dict[str, Any]:
    """The project's FTS configuration, from its one definition (dbt var `fts_config`).

    The artifact build records this next to the index it builds; serving tokenises
    queries the same way.
    """
    return dict(project_vars()["fts_config"])


# The canonical schema version the importer writes and the projection reads.
CANONICAL_SCHEMA_VERSION = int(project_vars()["canonical_schema_version"])


def run_dbt(
    settings: Settings,
    args: list[str],
    *,
    environment: dict[str, str],
    target_subdir: str,
    progress: bool = False,
) -> Any:
    """Run one dbt command of this project in-process; raise SlackqueryError on failure.

    The one place dbt is invoked: project and profile folders from the repository, the
    target folder (`target_subdir`, one per caller so partial-parse state is never
    shared) and logs under SLACKQUERY_HOME, profile paths passed in `environment`, and
    the DuckDB file dbt-duckdb keeps open released afterwards.
    """
    target = make_folder(settings.home / "dbt" / target_subdir)  # dbt's would be 0755
    logs = make_folder(settings.log_path / "dbt")
    full_args = [
        *args,
        "--project-dir",
        str(PROJECT_DIR),
        "--profiles-dir",
        str(PROFILES_DIR),
        "--target-path",
        str(target),
        "--log-path",
        str(logs),
        "--log-level",
        "none",
        "--log-level-file",
        "debug",
        "--no-use-colors",
    ]
    environment = {**environment, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    # dbt logs to its file only (`--log-level none` on the console: its error lines and, for
    # an interrupt, a traceback came before the command's one line); what it still prints
    # goes to stderr, since stdout belongs to the command's result (`--json`).
    with (
        _environment(environment),
        redirect_stdout(sys.stderr),
        _Progress() if progress else nullcontext() as display,
        interrupts.kept(),  # a run-operation's query ended by Ctrl-C is dbt's "error"
    ):
        result = _invoke_dbt(full_args, display)
    _raise_for_failure(result, args[0], logs / "dbt.log")
    return result.result


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the dbt run only (profiles.yml reads them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Progress:
    """A rich progress bar on stderr fed by dbt's node start/finish events."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("dbt build"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("parsing", total=None)

    def __enter__(self) -> "_Progress":
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def __call__(self, event: Any) -> None:
        """dbt callback: advance on every finished node, show the running one."""
        name = event.info.name
        if name in ("LogStartLine",):
            self._progress.update(
                self._task, total=event.data.total, description=event.data.description
            )
        elif name == "NodeFinished":
            self._progress.advance(self._task)


def _invoke_dbt(args: list[str], display: _Progress | None) -> Any:
    """Run dbt in this process; release its DuckDB handles before returning."""
    from dbt.cli.main import dbtRunner

    callbacks: list[Any] = [_crash_after_a_node]
    if display is not None:
        callbacks.append(display)
    runner = dbtRunner(callbacks=callbacks)
    try:
        return runner.invoke(args)
    finally:
        _close_dbt_duckdb()
        _close_dbt_log()


def _crash_after_a_node(event: Any) -> None:
    """Crash-test hook: die once a dbt node has finished, leaving later models stale."""
    if event.info.name == "NodeFinished":
        crash_point("dbt_node_finished")


def _close_dbt_duckdb() -> None:
    """Close the DuckDB database dbt-duckdb keeps open after a run.

    dbt-duckdb holds one process-wide environment (the open state DB) between
    invocations, and its own `close_all_connections` only drops the reference. Until
    it is closed, nothing else in this process (the counts below, the embed flow, a
    test) may open the state DB with other settings, and no other process may write it.
    """
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    with DuckDBConnectionManager._LOCK:
        environment = DuckDBConnectionManager._ENV
        DuckDBConnectionManager._ENV = None
        if environment is not None:
            environment.close()


def _close_dbt_log() -> None:
    """Close dbt's log file, which dbt itself leaves open until its next invocation.

    A long-lived process (a Prefect worker, `serve` behind a schedule) would otherwise hold
    SLACKQUERY_HOME/logs/dbt/dbt.log open between runs. The handler reopens the file if dbt
    logs again.
    """
    for handler in logging.getLogger("file_log").handlers:
        handler.close()


def _one_line(said: str) -> str:
    """A dbt error's lines as one, its reason kept. dbt ends a compilation error with its
    macro call stack (`> in macro …`, `> called by …`, most of a ~900-character line): the
    dbt log keeps it, the one line does not."""
    lines = said.splitlines()
    return " ".join(" ".join(line for line in lines if not line.lstrip().startswith(">")).split())


def _raise_for_failure(result: Any, command: str, log_file: Path) -> None:
    """Turn an unsuccessful dbt result into a one-line SlackqueryError naming the node, and
    where to look further: dbt's log, and for a failed data test the query that lists the
    rows it failed on."""
    if result.success:
        return
    if isinstance(result.exception, KeyboardInterrupt):  # Ctrl-C or SIGTERM, which dbt catches
        raise result.exception
    look = f"dbt's log: {log_file}"
    if result.exception is not None:  # e.g. a Jinja error of a macro, found at parse time
        raise SlackqueryError(f"dbt {command} failed: {_one_line(str(result.exception))} ({look})")
    failures = [
        node_result
        for node_result in getattr(result.result, "results", [])
        if str(node_result.status) in ("error", "fail", "runtime error")
    ]
    if not failures:
        raise SlackqueryError(f"dbt {command} failed ({look})")
    first = failures[0]
    message = _one_line(str(first.message or first.status))
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    # A run-operation's result names no node (its macro is the command itself).
    node = getattr(first, "node", None)
    where = f" at {node.unique_id}" if node is not None else ""
    if node is not None and str(first.status) == "fail":  # a data test's rows, not an error
        look = f"the rows it failed on: the query in {node.compiled_path}; {look}"
    raise SlackqueryError(f"dbt {command} failed{where}: {message}{more} ({look})")
