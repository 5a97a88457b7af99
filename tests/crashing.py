"""Shared by the crash-safety tests: a CLI step that SIGKILLs itself, an artifact's content,
and a process that holds a DuckDB file open."""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slackquery.artifacts import arrays, files
from slackquery.crash import CRASH_ENV
from slackquery.duckdb_setup import open_database

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT_CONTENT_SQL = """
select
    (select md5(string_agg(document_id || text_lexical || permalink, '|' order by document_id))
        from search_documents),
    (select md5(string_agg(document_id || vector_sketch::varchar, '|' order by document_id))
        from document_vectors),
    (select source_watermark || generation_id || document_count from artifact_metadata)
"""


def run_cli_until(crash_at: str, env: dict[str, str], *args: str) -> int:
    """Run `slackquery ARGS` in a subprocess that dies at `crash_at`; return its status."""
    process = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env, CRASH_ENV: crash_at},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return process.returncode


def query_one(path: Path, sql: str) -> tuple:
    """The one row `sql` returns from the DuckDB file at `path`, opened read-only."""
    connection = open_database(str(path), read_only=True)
    try:
        row = connection.execute(sql).fetchone()
    finally:
        connection.close()
    assert row is not None
    return tuple(row)


def artifact_content(path: Path) -> tuple:
    """A digest of what an artifact serves: documents, vectors (in the arrays; their
    sketches in the file), inputs and counts."""
    vectors = arrays.array_file(files.arrays_dir_of(path), "vectors")
    return (*query_one(path, ARTIFACT_CONTENT_SQL), files.sha256_file(vectors))


_HOLD_OPEN = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def held_open(path: Path) -> Iterator[int]:
    """Another process holding the DuckDB file `path` open for writing; yields its PID."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_OPEN, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        yield holder.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
