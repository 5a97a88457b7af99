"""`vector_arrays`: the arrays folder beside the artifact agrees with its DuckDB tables.

Serving ranks by these maps, never by `document_vectors`, so the table's checks say
nothing about what is served unless the arrays match it: one position per vector of the
table, of the stored dimension; `vector_rows` strictly ascending, each a `search_documents`
row (in `document_id` order) that has a vector; and, for an evenly spread sample of
positions, the float32 vector equal to the table's and the int8 codes within half a
quantisation step of it. Each batch is a slice of positions read from the maps, so
validation holds no copy of the matrix.
"""

from collections.abc import Iterator
from typing import Any

import duckdb
import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from expectations.suites import Artifact, equals_metadata, param, row_count
from slackquery.artifacts import arrays
from slackquery.errors import SlackqueryError

TABLE = "vector_arrays"
ID_COLUMNS = ["position"]
# Positions whose vectors are compared with the table's, spread evenly over the matrix.
SAMPLE_POSITIONS = 1000
POSITION_COLUMNS = (
    "position",
    "vector_row",
    "is_ascending",
    "has_table_vector",
    "matches_table",
    "codes_decode",
)


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per array position (sampled checks null elsewhere)."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        gxe.ExpectColumnValuesToBeInSet(
            column="arrays_readable",
            value_set=[True],
            description="the arrays folder beside the artifact opens: every .npy file "
            "present with its dtype, and their shapes agree",
        ),
        equals_metadata("array_count", "vector_count", "vector array length"),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="array_count",
            column_B="table_vector_count",
            description="as many array positions as document_vectors has rows",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="array_dimension",
            value_set=param("dimensions"),
            description="the matrices have the generation's stored dimension",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_ascending", value_set=[True], description="vector_rows strictly ascending"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="has_table_vector",
            value_set=[True],
            description="each vector row is a search_documents row with a vector in "
            "document_vectors",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="matches_table",
            value_set=[True],
            description="sampled float32 vectors equal their document_vectors rows",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="codes_decode",
            value_set=[True],
            description="sampled int8 codes decode to their float32 vectors within half "
            "a quantisation step",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def _rows_with_vectors(conn: duckdb.DuckDBPyConnection) -> np.ndarray:
    """Per `search_documents` row, in `document_id` order: whether it has a vector."""
    flags = conn.execute(
        """
        select document_id in (select document_id from document_vectors) as has_vector
        from search_documents
        order by document_id
        """
    ).fetchnumpy()["has_vector"]
    return np.asarray(flags, dtype=bool)


def _table_vectors(conn: duckdb.DuckDBPyConnection, rows: list[int]) -> dict[int, np.ndarray]:
    """`document_vectors` embeddings of these `search_documents` rows, by row."""
    found = conn.execute(
        """
        with numbered as (
            select document_id, row_number() over (order by document_id) - 1 as row_index
            from search_documents
        ),
        sampled as (
            select document_id, row_index from numbered
            where row_index in (select unnest($rows))
        )
        select sampled.row_index, document_vectors.embedding
        from sampled
        inner join document_vectors on sampled.document_id = document_vectors.document_id
        """,
        {"rows": rows},
    ).fetchall()
    return {int(row): np.asarray(embedding, dtype=np.float32) for row, embedding in found}


def _sampled_checks(
    conn: duckdb.DuckDBPyConnection, mapped: arrays.VectorArrays
) -> dict[int, tuple[bool, bool]]:
    """Position -> (float32 vector equals the table's, int8 codes decode to it)."""
    count = len(mapped.rows)
    positions = np.unique(np.linspace(0, count - 1, min(count, SAMPLE_POSITIONS)).astype(int))
    table = _table_vectors(conn, [int(row) for row in mapped.rows[positions]])
    # Half a step, plus float32 rounding of x / scale and of code * scale: up to ~1e-5 of
    # a step for codes near 127 (a 1e-5 relative margin failed one of 768,000 sampled
    # values at 1M). A wrong code is off by a whole step.
    half_step = mapped.codes.scales * (0.5 + 1e-4)
    checks = {}
    for position in positions.tolist():
        vector = mapped.vectors[position]
        expected = table.get(int(mapped.rows[position]))
        decoded = mapped.codes.codes[position] * mapped.codes.scales
        checks[position] = (
            expected is not None and np.array_equal(vector, expected),
            bool(np.all(np.abs(decoded - vector) <= half_step)),
        )
    return checks


def _position_frame(
    mapped: arrays.VectorArrays,
    start: int,
    stop: int,
    has_vector: np.ndarray,
    sampled: dict[int, tuple[bool, bool]],
) -> pd.DataFrame:
    rows = mapped.rows[start:stop]
    previous = mapped.rows[start - 1 : stop - 1] if start else np.r_[-1, rows[:-1]]
    inside = (rows >= 0) & (rows < len(has_vector))
    checks = [sampled.get(position) for position in range(start, stop)]
    return pd.DataFrame(
        {
            "position": np.arange(start, stop),
            "vector_row": rows,
            "is_ascending": rows > previous,
            "has_table_vector": inside & has_vector[np.where(inside, rows, 0)],
            "matches_table": [check[0] if check else None for check in checks],
            "codes_decode": [check[1] if check else None for check in checks],
        }
    )


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Batches of `chunk_rows` positions, each carrying the whole-array facts."""
    no_position = {column: [None] for column in POSITION_COLUMNS}
    try:
        mapped = arrays.open_arrays(artifact.arrays).vectors
    except SlackqueryError:
        # Only the unreadable folder fails: every other check is null, so GX skips it.
        yield pd.DataFrame(no_position).assign(
            arrays_readable=False, array_count=None, table_vector_count=None, array_dimension=None
        )
        return
    count, dimension = mapped.vectors.shape
    facts: dict[str, Any] = {
        "arrays_readable": True,
        "array_count": count,
        "table_vector_count": row_count(artifact.conn, "document_vectors"),
        "array_dimension": dimension,
    }
    if count == 0:
        yield pd.DataFrame(no_position).assign(**facts)
        return
    has_vector = _rows_with_vectors(artifact.conn)
    sampled = _sampled_checks(artifact.conn, mapped)
    for start in range(0, count, artifact.chunk_rows):
        stop = min(count, start + artifact.chunk_rows)
        yield _position_frame(mapped, start, stop, has_vector, sampled).assign(**facts)
