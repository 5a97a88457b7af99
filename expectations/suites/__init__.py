"""One module per published table, each exposing `TABLE`, `ID_COLUMNS`,
`build_suite() -> gx.ExpectationSuite` (named after the table) and
`check_frames(artifact) -> Iterator[DataFrame]`, the batches the suite validates.

Expected values (counts from `artifact_metadata`, the stored dimension, drift bounds
from the previous published artifact, schema signatures) arrive at run time as GX
expectation parameters (`{"$PARAMETER": name}`), so suites stay static code.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import pandas as pd


@dataclass(frozen=True)
class Artifact:
    """A read-only connection to the artifact under validation and how to batch it."""

    conn: duckdb.DuckDBPyConnection
    chunk_rows: int
    has_fts: bool


def param(name: str) -> dict[str, str]:
    """A GX expectation parameter reference."""
    return {"$PARAMETER": name}


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


def chunks(artifact: Artifact, table: str, select_sql: str) -> Iterator[pd.DataFrame]:
    """Run `select_sql` once per rowid range of `table` (placeholders $lo and $hi).

    Rowid ranges follow the physical order the build wrote, so each chunk is one cheap
    sequential scan and only `chunk_rows` rows of check columns are in memory at once.
    """
    total_row = artifact.conn.execute(f"select max(rowid) from {table}").fetchone()
    last = total_row[0] if total_row and total_row[0] is not None else -1
    if last < 0:
        yield artifact.conn.execute(select_sql, {"lo": 0, "hi": -1}).df()
        return
    for lo in range(0, last + 1, artifact.chunk_rows):
        yield artifact.conn.execute(select_sql, {"lo": lo, "hi": lo + artifact.chunk_rows - 1}).df()
