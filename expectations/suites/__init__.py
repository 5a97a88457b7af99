"""One module per published table (and `vector_arrays`, `document_arrays` and
`postings_arrays` for the arrays beside them, `vector_coverage` for the comparison with the
published artifact), each exposing `TABLE`, `ID_COLUMNS`,
`build_suite() -> gx.ExpectationSuite` (named after the table) and
`check_frames(artifact) -> Iterator[DataFrame]`, the batches the suite validates.

Expected values (counts from `artifact_metadata`, the stored dimension, drift bounds
from the previous published artifact, schema signatures) arrive at run time as GX
expectation parameters (`{"$PARAMETER": name}`), so suites stay static code.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import great_expectations.expectations as gxe
import pandas as pd

# Rows per DuckDB vector: `fetch_df_chunk` hands results over in multiples of it.
STANDARD_VECTOR_SIZE = 2048


@dataclass(frozen=True)
class Artifact:
    """A read-only connection to the artifact under validation, the arrays folder beside
    it, how to batch them, and what the published artifact recorded."""

    conn: duckdb.DuckDBPyConnection
    chunk_rows: int
    has_fts: bool
    arrays: Path
    # The published artifact's metadata row, when the candidate is compared with it.
    previous: dict[str, Any] | None = None


def param(name: str) -> dict[str, str]:
    """A GX expectation parameter reference."""
    return {"$PARAMETER": name}


def matches_contract(table: str, detail: str = "") -> gxe.ExpectColumnValuesToBeInSet:
    """The table's columns and types are the contract's, in its order (schema.py)."""
    return gxe.ExpectColumnValuesToBeInSet(
        column="schema_signature",
        value_set=param(f"signature_{table}"),
        description=f"columns and types in contract order{detail}",
    )


def equals_metadata(column: str, count: str, what: str) -> gxe.ExpectColumnValuesToBeBetween:
    """A whole-table count (`column` of every batch row) equals artifact_metadata's `count`."""
    return gxe.ExpectColumnValuesToBeBetween(
        column=column,
        min_value=param(count),
        max_value=param(count),
        description=f"{what} equals artifact_metadata.{count}",
    )


def signature_sql(table: str) -> str:
    """Scalar SQL: the table's ordered `name type, …` list, as `schema.schema_signature`."""
    return (
        "(select string_agg(column_name || ' ' || data_type, ', ' order by column_index) "
        f"from duckdb_columns() where schema_name = 'main' and table_name = '{table}')"
    )


def row_count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    """Rows in one artifact table."""
    row = conn.execute(f"select count(*) from {table}").fetchone()
    return int(row[0]) if row else 0


def table_facts(conn: duckdb.DuckDBPyConnection, table: str, extra: str = "") -> dict:
    """Whole-table facts computed once (row count, signature, any `extra` aggregates).

    They are the same for every row, so they are added to each batch in pandas rather
    than repeated by SQL: a batch then holds one reference per row, not one string copy.
    """
    cursor = conn.execute(
        f"select count(*) as table_rows, {signature_sql(table)} as schema_signature"
        f"{', ' + extra if extra else ''} from {table}"
    )
    row = cursor.fetchone()
    assert row is not None
    return dict(zip([column[0] for column in cursor.description], row, strict=True))


DOCUMENT_ROWS = "document_rows"


def document_rows(conn: duckdb.DuckDBPyConnection) -> str:
    """The name of a temporary table of `(row_index, document_id)`, row_index being the
    row in `document_id` order, which every array indexes by; made once per connection
    (temporary tables need no write access), so suites need not sort the table again."""
    conn.execute(
        f"create temp table if not exists {DOCUMENT_ROWS} as select "
        "row_number() over (order by document_id) - 1 as row_index, document_id "
        "from search_documents"
    )
    return DOCUMENT_ROWS


def chunks(
    artifact: Artifact, select_sql: str, constants: dict | None = None
) -> Iterator[pd.DataFrame]:
    """Stream the result of one query over a whole table in batches of `chunk_rows` rows.

    The query runs once (one scan, one hash join, one group-by) and DuckDB hands its
    result over in vectors as it produces them, so only about `chunk_rows` rows of check
    columns are in memory at once. `constants` become columns of every batch. A table
    with no rows gives one empty batch, so its suite still runs.
    """
    result = artifact.conn.execute(select_sql)
    vectors = max(1, -(-artifact.chunk_rows // STANDARD_VECTOR_SIZE))
    pending: list[pd.DataFrame] = []
    pending_rows = 0
    emitted = False
    while True:
        frame = result.fetch_df_chunk(vectors)
        done = frame.empty
        if not done:
            pending.append(frame)
            pending_rows += len(frame)
        while pending_rows >= artifact.chunk_rows or (done and (pending_rows or not emitted)):
            merged = (
                pending[0]
                if len(pending) == 1
                else pd.concat(pending, ignore_index=True)
                if pending
                else frame
            )
            batch = merged.iloc[: artifact.chunk_rows].reset_index(drop=True)
            rest = merged.iloc[artifact.chunk_rows :]
            pending = [rest] if len(rest) else []
            pending_rows = len(rest)
            yield batch.assign(**(constants or {}))
            emitted = True
        if done:
            return
