"""`vector_arrays`: the vectors, which live only in the arrays folder beside the artifact,
and their agreement with its DuckDB tables.

One position per `document_vectors` row, of the stored dimension; `vector_rows` strictly
ascending, each a `search_documents` row (in `document_id` order) that has a vector; every
vector finite and of unit norm, and its sketch (`schema.sketch_probes`) equal to the one
the build computed in SQL from the state's vector for that document, which ties every
position to its document without a second copy of the matrix; for an evenly spread
sample of positions, the int8 codes within half a quantisation step of the vector and the
int4 nibbles equal to those codes rounded (`arrays.pack_nibbles`). Each batch is a slice of
positions read from the maps, a block at a time, so validation holds no copy of the
matrix.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import duckdb
import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from expectations.suites import Artifact, document_rows, equals_metadata, param, row_count
from slackquery.artifacts import arrays, schema
from slackquery.errors import SlackqueryError

TABLE = "vector_arrays"
# A failure names the document whose vector it is (null for a row outside the table).
ID_COLUMNS = ["document_id"]
# Positions whose int8 codes and nibbles are compared, spread evenly over the matrix.
SAMPLE_POSITIONS = 1000
# Vectors measured per step: 16,384 x 768 float32 is 48 MiB.
_BLOCK_ROWS = 16_384
POSITION_COLUMNS = (
    "position",
    "document_id",
    "vector_row",
    "is_ascending",
    "has_table_vector",
    "sketch_matches",
    "is_finite",
    "norm_error",
    "codes_decode",
    "nibbles_match",
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
            column="sketch_matches",
            value_set=[True],
            description="each vector's sketch equals its document's in document_vectors",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_finite", value_set=[True], description="vector values are finite"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="norm_error",
            min_value=0,
            max_value=param("max_norm_error"),
            description="vectors are unit norm within 1e-5",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="codes_decode",
            value_set=[True],
            description="sampled int8 codes decode to their float32 vectors within half "
            "a quantisation step",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="nibbles_match",
            value_set=[True],
            description="sampled int4 nibbles are their int8 codes rounded, two per byte",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def _table_sketches(conn: duckdb.DuckDBPyConnection) -> np.ndarray:
    """Per `search_documents` row, in `document_id` order: its vector's sketch from
    `document_vectors`, NaN where it has none."""
    products = ", ".join(
        f"coalesce(vector_sketch[{index + 1}], 'nan'::float) as p{index}"
        for index in range(schema.SKETCH_PROBES)
    )
    found = conn.execute(
        f"""
        with sketches as (
            select document_id, any_value(vector_sketch) as vector_sketch
            from document_vectors
            group by document_id
        )
        select {products}
        from {document_rows(conn)} as documents
        left join sketches on documents.document_id = sketches.document_id
        order by documents.row_index
        """
    ).fetchnumpy()
    return np.column_stack([found[f"p{index}"] for index in range(schema.SKETCH_PROBES)])


def _measure(vectors: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each vector's sketch and norm, a block at a time. NumPy sums each row's squares
    pairwise (within 6e-8 of a float64 sum at 100k x 768, against the 1e-5 tolerance)."""
    sketches = np.empty((len(vectors), len(probes)), dtype=np.float32)
    norms = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), _BLOCK_ROWS):
        block = vectors[start : start + _BLOCK_ROWS]
        sketches[start : start + len(block)] = block @ probes.T
        norms[start : start + len(block)] = np.sqrt(np.square(block).sum(axis=1))
    return sketches, norms


def _codes_decode(mapped: arrays.VectorArrays, positions: np.ndarray) -> np.ndarray:
    """Whether the int8 codes at these positions decode to their float32 vectors."""
    # Half a step, plus float32 rounding of x / scale and of code * scale: up to ~1e-5 of
    # a step for codes near 127 (a 1e-5 relative margin failed one of 768,000 sampled
    # values at 1M). A wrong code is off by a whole step.
    half_step = mapped.codes.scales * (0.5 + 1e-4)
    decoded = mapped.codes.codes[positions] * mapped.codes.scales
    return np.all(np.abs(decoded - mapped.vectors[positions]) <= half_step, axis=1)


def _position_frame(
    mapped: arrays.VectorArrays,
    document_ids: Sequence[str | None],
    start: int,
    stop: int,
    table_sketches: np.ndarray,
    probes: np.ndarray,
    sampled: np.ndarray,
) -> pd.DataFrame:
    """One batch of positions: their rows, sketches, norms and (sampled) codes checked."""
    rows = mapped.rows[start:stop]
    previous = mapped.rows[start - 1 : stop - 1] if start else np.r_[-1, rows[:-1]]
    inside = (rows >= 0) & (rows < len(table_sketches))
    expected = table_sketches[np.where(inside, rows, 0)]
    has_table_vector = inside & ~np.isnan(expected).any(axis=1)
    sketches, norms = _measure(mapped.vectors[start:stop], probes)
    close = np.abs(sketches - expected) <= schema.SKETCH_TOLERANCE
    in_batch = sampled[(sampled >= start) & (sampled < stop)]
    codes_decode = np.full(stop - start, None, dtype=object)
    codes_decode[in_batch - start] = _codes_decode(mapped, in_batch)
    nibbles_match = np.full(stop - start, None, dtype=object)
    nibbles_match[in_batch - start] = np.all(
        mapped.codes.nibbles[in_batch] == arrays.pack_nibbles(mapped.codes.codes[in_batch]),
        axis=1,
    )
    return pd.DataFrame(
        {
            "position": np.arange(start, stop),
            "document_id": [
                document_ids[row] if is_inside else None
                for row, is_inside in zip(rows.tolist(), inside.tolist(), strict=True)
            ],
            "vector_row": rows,
            "is_ascending": rows > previous,
            "has_table_vector": has_table_vector,
            "sketch_matches": has_table_vector & close.all(axis=1),
            "is_finite": np.isfinite(norms),
            "norm_error": np.abs(norms - 1),
            "codes_decode": codes_decode,
            "nibbles_match": nibbles_match,
        }
    )


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Batches of `chunk_rows` positions, each carrying the whole-array facts."""
    no_position = {column: [None] for column in POSITION_COLUMNS}
    try:
        opened = arrays.open_arrays(artifact.arrays)
    except SlackqueryError:
        # Only the unreadable folder fails: every other check is null, so GX skips it.
        yield pd.DataFrame(no_position).assign(
            arrays_readable=False, array_count=None, table_vector_count=None, array_dimension=None
        )
        return
    mapped, document_ids = opened.vectors, opened.documents.document_ids
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
    table_sketches = _table_sketches(artifact.conn)
    probes = schema.sketch_probes(dimension)
    sampled = np.unique(np.linspace(0, count - 1, min(count, SAMPLE_POSITIONS)).astype(int))
    for start in range(0, count, artifact.chunk_rows):
        stop = min(count, start + artifact.chunk_rows)
        batch = _position_frame(mapped, document_ids, start, stop, table_sketches, probes, sampled)
        yield batch.assign(**facts)
