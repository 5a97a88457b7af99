"""The artifact's full-text index: built by the project's dbt macro, then read back.

The FTS configuration has one source, the `build_fts_index` dbt macro and its
`fts_config` var. The build runs that macro against the candidate file
(`dbt run-operation … --target artifact`) instead of repeating its SQL, then reads the
configuration DuckDB actually compiled into the index (`tokenize`, `match_bm25`,
`stopwords`) so `artifact_metadata.fts_config_json` records what was built, not what
someone believed was built.
"""

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts import schema
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

PROJECT_DIR = Path(__file__).resolve().parents[2]
BUILD_PATH_ENV = "SLACKQUERY_ARTIFACT_BUILD_PATH"

_TOKENIZE = re.compile(r"regexp_replace\((?P<input>.*), '(?P<ignore>(?:[^']|'')*)', ' ', 'g'\)")
_STEMMER = re.compile(r"stem\(unnest\([^)]*\)\), '(?P<stemmer>[^']*)'\)")


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """Set one environment variable for the duration of an in-process dbt call.

    dbt reads profile paths through `env_var()`, which looks at `os.environ`.
    """
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def run_dbt(settings: Settings, args: list[str], *, target_subdir: str) -> Any:
    """Invoke dbt in-process with the project's folders; raise SlackqueryError on failure.

    Target and log folders live under SLACKQUERY_HOME (one target folder per use, so the
    projection's partial-parse state is never shared with artifact builds).
    """
    from dbt.cli.main import dbtRunner  # dbt's import costs ~1 s; only builds pay it.

    target_path = settings.home / "dbt" / target_subdir
    full_args = [
        *args,
        "--project-dir",
        str(PROJECT_DIR),
        "--profiles-dir",
        str(PROJECT_DIR / "profiles"),
        "--target-path",
        str(target_path),
        "--log-path",
        str(settings.log_path / "dbt"),
        "--quiet",
    ]
    try:
        result = dbtRunner().invoke(full_args)
    finally:
        release_dbt_duckdb()
    if not result.success:
        detail = f": {result.exception}" if result.exception else ""
        raise SlackqueryError(f"dbt {' '.join(args[:2])} failed{detail} (logs in {target_path})")
    return result.result


def release_dbt_duckdb() -> None:
    """Close the DuckDB database that dbt-duckdb keeps open after an in-process run.

    dbt-duckdb caches one environment (and its DuckDB instance) per process for reuse.
    Left open, it would hold the candidate file's write lock, so the read-only validation
    process could not open it, and later opens with another configuration would fail.
    """
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    environment = DuckDBConnectionManager._ENV
    if environment is not None:
        environment.close()
    DuckDBConnectionManager.close_all_connections()


def build_index(settings: Settings, artifact_path: Path) -> None:
    """Build the FTS index of the candidate's `search_documents` with the dbt macro.

    The caller must have closed every connection to `artifact_path`: dbt opens it as the
    one writer.
    """
    macro_args = {
        "relation": schema.FTS_RELATION,
        "id_column": schema.FTS_ID_COLUMN,
        "text_column": schema.FTS_TEXT_COLUMNS[0],
    }
    with _environment(BUILD_PATH_ENV, str(artifact_path)):
        run_dbt(
            settings,
            [
                "run-operation",
                "build_fts_index",
                "--args",
                json.dumps(macro_args),
                "--target",
                "artifact",
            ],
            target_subdir="artifact",
        )


def read_config(conn: duckdb.DuckDBPyConnection, fts_schema: str = schema.FTS_SCHEMA) -> dict:
    """The configuration compiled into an FTS index, read from its DuckDB macros.

    Returns `{stemmer, stopwords, ignore, lower, strip_accents, relation, id_column,
    text_columns, index_schema}`; serving tokenises queries from this record.
    """
    macros = dict(
        conn.execute(
            "select function_name, macro_definition from duckdb_functions() "
            "where schema_name = ? and function_name in ('tokenize', 'match_bm25')",
            [fts_schema],
        ).fetchall()
    )
    if "tokenize" not in macros or "match_bm25" not in macros:
        raise SlackqueryError(f"FTS index {fts_schema} is missing from the artifact")
    tokenize = _TOKENIZE.search(macros["tokenize"])
    stemmer = _STEMMER.search(macros["match_bm25"])
    if tokenize is None or stemmer is None:
        raise SlackqueryError(f"cannot read the configuration of FTS index {fts_schema}")
    row = conn.execute(f"select count(*) from {fts_schema}.stopwords").fetchone()
    stopword_count = row[0] if row else 0
    fields = [
        name
        for (name,) in conn.execute(
            f"select field from {fts_schema}.fields order by fieldid"
        ).fetchall()
    ]
    return {
        "stemmer": stemmer.group("stemmer"),
        "stopwords": "none" if stopword_count == 0 else f"custom ({stopword_count} words)",
        "ignore": tokenize.group("ignore").replace("''", "'"),
        "lower": int("lower(" in tokenize.group("input")),
        "strip_accents": int("strip_accents(" in tokenize.group("input")),
        "relation": schema.FTS_RELATION,
        "id_column": schema.FTS_ID_COLUMN,
        "text_columns": fields,
        "index_schema": fts_schema,
    }
