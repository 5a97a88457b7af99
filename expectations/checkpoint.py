"""Validate one candidate artifact against every suite; one pass/fail result for publish.

Run as `python -m expectations.checkpoint ARTIFACT [--previous PUBLISHED] [--output JSON]`:
the build runs it in a process of its own (forked by `expectations.server`), which opens
the candidate with its arrays folder (`files.arrays_dir_of`) and the previous published
artifact, for the count-drift and vector-coverage checks, read-only. Exit status 0 =
passed, 1 = failed; the result JSON lists each failed expectation with sample offending ids.
A previous artifact that cannot be read (damaged after its seal) leaves those two checks
without a baseline, as when nothing is published, and the result says so in `warnings`:
refusing would keep the damaged artifact current, when publishing a sound build is the way
off it. Exit status 2 = it could not run (the candidate itself does not open, say): the
last line of its output, `error: …`, says why.
"""

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from expectations.context import make_context, run_suite
from expectations.suites import (
    Artifact,
    artifact_metadata,
    channel_members,
    channels,
    document_arrays,
    document_vectors,
    fts_main_search_documents,
    limited_accounts,
    postings_arrays,
    search_documents,
    users,
    vector_arrays,
    vector_coverage,
    workspaces,
)
from slackquery.artifacts import schema
from slackquery.artifacts.files import arrays_dir_of, write_json_atomic
from slackquery.duckdb_setup import DamagedDatabase, connect, damage_of, open_database
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

SUITES = (
    artifact_metadata,
    search_documents,
    document_vectors,
    vector_arrays,
    document_arrays,
    postings_arrays,
    vector_coverage,
    workspaces,
    channels,
    users,
    channel_members,
    limited_accounts,
    fts_main_search_documents,
)
DEFAULT_CHUNK_ROWS = 250_000
# DuckDB's buffer pool would otherwise keep every block the checks scan (the whole
# file); the checks themselves need a fraction of that.
DEFAULT_MEMORY_LIMIT = "1GB"
MAX_NORM_ERROR = 1e-5
DEFAULT_MAX_COUNT_DRIFT: float = Settings.model_fields["max_count_drift"].default
DEFAULT_COUNT_DRIFT_MIN_DROP: int = Settings.model_fields["count_drift_min_drop"].default
# `main`'s exit status when the checkpoint could not run; its last output line says why.
COULD_NOT_RUN = 2


def _refusal(expectation: str, description: str) -> dict[str, Any]:
    """A failure found before the suites run, in the shape of theirs."""
    return {
        "suite": artifact_metadata.TABLE,
        "expectation": expectation,
        "description": description,
        "column": None,
        "unexpected_count": None,
        "sample": [],
    }


def peak_rss_mib() -> float | None:
    """This process's peak resident memory (VmHWM), or None where /proc is missing.

    A validation process is forked from `expectations.server`, so this peak includes the
    server's imports (as it did when each validation imported them itself) but nothing of
    the builder's memory.
    """
    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def _open(
    path: Path, memory_limit: str = DEFAULT_MEMORY_LIMIT, spill: str | None = None
) -> duckdb.DuckDBPyConnection:
    conn = connect(str(path), read_only=True, what="artifact")
    conn.execute("set enable_progress_bar = false")
    conn.execute("set memory_limit = ?", [memory_limit])
    if spill is not None:
        # Never DuckDB's default `<file>.tmp` beside the artifact, a name builds own.
        conn.execute("set temp_directory = ?", [spill])
    return conn


def _metadata(conn: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    # Looked up first: a missing table's name would be resolved by DuckDB's replacement
    # scan to this module's `artifact_metadata` suite module, an error of its own.
    present = conn.execute(
        "select count(*) from duckdb_tables() where table_name = 'artifact_metadata'"
    ).fetchone()
    if not present or not present[0]:
        return None
    cursor = conn.execute("select * from artifact_metadata limit 2")
    rows = cursor.fetchall()
    if len(rows) != 1:
        return None
    names = [column[0] for column in cursor.description]
    return dict(zip(names, rows[0], strict=True))


def _previous_metadata(previous: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The previous artifact's metadata; None, with a warning added to `warnings`, when it
    cannot be read, so the checks that compare with it have no baseline."""
    reason = "it has no single artifact_metadata row"
    try:
        conn = open_database(str(previous), read_only=True, what="artifact")
        try:
            metadata = _metadata(conn)
        finally:
            conn.close()
    except (SlackqueryError, duckdb.Error) as error:
        metadata = None
        if isinstance(error, DamagedDatabase):
            reason = error.detail
        else:
            reason = damage_of(error) or " ".join(str(error).split())
    if metadata is None:
        warnings.append(
            f"the previously published artifact {previous.name} cannot be read ({reason}); "
            "count drift and vector coverage were not compared with it"
        )
    return metadata


def _has_fts(conn: duckdb.DuckDBPyConnection) -> bool:
    row = conn.execute(
        "select count(*) from duckdb_tables() where schema_name = ? and table_name = 'docs'",
        [schema.FTS_SCHEMA],
    ).fetchone()
    return bool(row and row[0])


def _drift_floor(previous: int | None, drift: float, min_drop: int) -> int:
    """The lowest count accepted after `previous`: a drop fails only when it is larger
    than `drift` of the previous count and more than `min_drop` as well. Growth always
    passes (a newer export holds more), so there is no upper bound.
    """
    if previous is None:
        return 0
    return max(0, min(int(previous * (1 - drift)), previous - min_drop))


def parameters_for(
    metadata: dict[str, Any],
    previous: dict[str, Any] | None,
    max_count_drift: float,
    count_drift_min_drop: int = DEFAULT_COUNT_DRIFT_MIN_DROP,
) -> dict[str, Any]:
    """GX expectation parameters: the metadata's counts, drift bounds, the contract."""
    generation = json.loads(metadata["generation_json"])
    dimension = int(generation["stored_dimension"])
    parameters: dict[str, Any] = {
        "document_count": int(metadata["document_count"]),
        "message_count": int(metadata["message_count"]),
        "vector_count": int(metadata["vector_count"]),
        "dimensions": [dimension],
        "schema_versions": [schema.SCHEMA_VERSION],
        "max_norm_error": MAX_NORM_ERROR,
    }
    for name, columns in schema.TABLE_COLUMNS.items():
        parameters[f"signature_{name}"] = [schema.schema_signature(columns)]
    for count in ("document_count", "message_count"):
        parameters[f"min_{count}"] = _drift_floor(
            int(previous[count]) if previous else None, max_count_drift, count_drift_min_drop
        )
    return parameters


def _selected(only: Collection[str] | None) -> tuple[Any, ...]:
    if only is None:
        return SUITES
    unknown = set(only) - {module.TABLE for module in SUITES}
    if unknown:
        names = ", ".join(module.TABLE for module in SUITES)
        raise SlackqueryError(f"no suite named {', '.join(sorted(unknown))}; suites: {names}")
    return tuple(module for module in SUITES if module.TABLE in only)


def validate_artifact(
    path: Path,
    *,
    previous: Path | None = None,
    max_count_drift: float = DEFAULT_MAX_COUNT_DRIFT,
    count_drift_min_drop: int = DEFAULT_COUNT_DRIFT_MIN_DROP,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """Run every suite against the artifact at `path`; return the merged result.

    Builds, publishes and rollbacks run every suite; `only` (suites' table names) narrows
    a run to look into one failure.
    """
    modules = _selected(only)
    started = datetime.now(UTC)
    result: dict[str, Any] = {
        "artifact": str(path),
        "previous": str(previous) if previous else None,
        "started_at": started.isoformat(),
        "success": False,
        "suites": {},
        "failures": [],
        "warnings": [],
    }
    spill = tempfile.TemporaryDirectory(prefix="slackquery-validate-")
    try:
        conn = _open(path, memory_limit, spill.name)
    except BaseException:
        spill.cleanup()
        raise
    try:
        metadata = _metadata(conn)
        if metadata is None:
            result["failures"].append(
                _refusal("artifact_metadata_present", "artifact_metadata has exactly one row")
            )
            return result
        if metadata["schema_version"] != schema.SCHEMA_VERSION:
            # Its tables are another version's: the suites would fail on a missing table
            # (a crash), not say why.
            result["failures"].append(
                _refusal(
                    "schema_version",
                    f"schema version {metadata['schema_version']}; validation checks version "
                    f"{schema.SCHEMA_VERSION}: build and publish a new one",
                )
            )
            return result
        previous_metadata = None
        if previous is not None:
            previous_metadata = _previous_metadata(previous, result["warnings"])
        parameters = parameters_for(
            metadata, previous_metadata, max_count_drift, count_drift_min_drop
        )
        result["build_id"] = metadata["build_id"]
        result["parameters"] = parameters
        artifact = Artifact(
            conn=conn,
            chunk_rows=chunk_rows,
            has_fts=_has_fts(conn),
            arrays=arrays_dir_of(path),
            previous=previous_metadata,
        )
        context = make_context()
        for module in modules:
            suite_started = time.perf_counter()
            outcome = run_suite(
                context,
                module.build_suite(),
                module.check_frames(artifact),
                id_columns=module.ID_COLUMNS,
                parameters=parameters,
            )
            result["suites"][outcome.suite] = {
                "success": outcome.success,
                "batches": outcome.batches,
                "evaluated": outcome.evaluated,
                "failed": len(outcome.failures),
                "seconds": round(time.perf_counter() - suite_started, 3),
                "batch_results": outcome.results,
            }
            result["failures"].extend(outcome.failures)
        result["success"] = not result["failures"] and all(
            suite["success"] for suite in result["suites"].values()
        )
        return result
    finally:
        conn.close()
        spill.cleanup()
        result["completed_at"] = datetime.now(UTC).isoformat()
        result["peak_rss_mib"] = peak_rss_mib()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: validate, write the result JSON, exit 0 when it passed and 1 when not;
    `COULD_NOT_RUN`, after one line `error: …`, when a SlackqueryError stopped it."""
    parser = argparse.ArgumentParser(
        prog="python -m expectations.checkpoint",
        description="Validate a search artifact (opened read-only) with the GX suites.",
    )
    parser.add_argument("artifact", type=Path, help="artifact file to validate")
    parser.add_argument(
        "--previous", type=Path, help="published artifact to compare counts against"
    )
    parser.add_argument(
        "--max-count-drift",
        type=float,
        default=DEFAULT_MAX_COUNT_DRIFT,
        help="largest relative drop of a count against --previous",
    )
    parser.add_argument(
        "--count-drift-min-drop",
        type=int,
        default=DEFAULT_COUNT_DRIFT_MIN_DROP,
        help="a drop of at most this many always passes",
    )
    parser.add_argument(
        "--chunk-rows", type=int, default=DEFAULT_CHUNK_ROWS, help="rows per validated batch"
    )
    parser.add_argument(
        "--memory-limit", default=DEFAULT_MEMORY_LIMIT, help="DuckDB memory_limit while checking"
    )
    parser.add_argument(
        "--suite",
        action="append",
        dest="suites",
        metavar="TABLE",
        help="run only this suite (repeatable; a build always runs every suite)",
    )
    parser.add_argument("--output", type=Path, help="write the result JSON here")
    args = parser.parse_args(argv)
    try:
        result = validate_artifact(
            args.artifact,
            previous=args.previous,
            max_count_drift=args.max_count_drift,
            count_drift_min_drop=args.count_drift_min_drop,
            chunk_rows=args.chunk_rows,
            memory_limit=args.memory_limit,
            only=args.suites,
        )
    except SlackqueryError as error:
        sys.stdout.flush()
        sys.stderr.write(f"error: {' '.join(str(error).split())}\n")
        return COULD_NOT_RUN
    if args.output:
        write_json_atomic(args.output, result)
    else:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    return 0 if result["success"] else 1


if __name__ == "__main__":
    sys.exit(main())
