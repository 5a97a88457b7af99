"""The artifact's full-text index: built by the project's dbt macro, then read back.

The FTS configuration has one source, the `build_fts_index` dbt macro and its
`fts_config` var. The build runs that macro on the candidate file instead of repeating
its SQL (`dbt run-operation build_artifact_fts_index --target artifact`; the file is a
macro argument, not part of the profile, so the profile is the same for every build and
dbt reuses its partial parse), then reads the configuration DuckDB actually compiled
into the index (`tokenize`, `match_bm25`, `stopwords`) so
`artifact_metadata.fts_config_json` records what was built, not what someone believed
was built.
"""

import json
import re
from pathlib import Path

import duckdb

from slackquery import projection
from slackquery.artifacts import schema
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

_TOKENIZE = re.compile(r"regexp_replace\((?P<input>.*), '(?P<ignore>(?:[^']|'')*)', ' ', 'g'\)")
_STEMMER = re.compile(r"stem\(unnest\([^)]*\)\), '(?P<stemmer>[^']*)'\)")


def build_index(settings: Settings, artifact_path: Path) -> None:
    """Build the FTS index of the candidate's `search_documents` with the dbt macro.

    The caller must have closed every connection to `artifact_path`: dbt attaches it as
    the one writer.
    """
    macro_args = {
        "artifact_path": str(artifact_path),
        "relation": schema.FTS_RELATION,
        "id_column": schema.FTS_ID_COLUMN,
        "text_column": schema.FTS_TEXT_COLUMNS[0],
    }
    projection.run_dbt(
        settings,
        [
            "run-operation",
            "build_artifact_fts_index",
            "--args",
            json.dumps(macro_args),
            "--target",
            "artifact",
            # Nothing reads this step's manifest.json or run_results.json, and writing
            # them cost each build about 0.2 s.
            "--no-write-json",
        ],
        environment={},
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
