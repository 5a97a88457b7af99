"""Shared by the crash-safety tests: a CLI step that SIGKILLs itself, an artifact's content."""

import os
import subprocess
import sys
from pathlib import Path

from slackquery.artifacts import arrays, files
from slackquery.crash import CRASH_ENV
from slackquery.duckdb_setup import connect

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
    connection = connect(str(path), read_only=True)
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
