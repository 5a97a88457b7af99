"""`document_vectors`: finite unit vectors of the stored dimension, at most one per message
document (how many messages have one is `artifact_metadata.vector_coverage`).

Vectors never reach pandas: SQL reduces each to its dimension, a finiteness flag and its
norm error in one streamed pass, handed to GX in batches, so a million-vector artifact
validates in bounded memory.
"""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import (
    Artifact,
    chunks,
    equals_metadata,
    matches_contract,
    param,
    table_facts,
)

TABLE = "document_vectors"
ID_COLUMNS = ["document_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per vector."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE, " (FLOAT[stored dimension])"),
        equals_metadata("table_rows", "vector_count", "row count"),
        gxe.ExpectColumnValuesToNotBeNull(column="document_id", description="ids are non-null"),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_duplicate_id", value_set=[False], description="one vector per document"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="document_kind",
            value_set=["message"],
            description="vectors belong to message documents (none orphaned, none for "
            "thread context)",
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="document_kind", description="no vector without its document"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="dimension",
            value_set=param("dimensions"),
            description="every vector has the generation's stored dimension",
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
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Per-vector dimension, finiteness and norm error from one streamed query."""
    sql = f"""
        with duplicate_ids as (
            select document_id from {TABLE} group by 1 having count(*) > 1
        ),
        documents as (
            select document_id, document_kind from search_documents
        ),
        vectors as (
            select
                document_id,
                len(embedding) as dimension,
                embedding is not null
                    and list_count(embedding::float[]) = len(embedding) as is_complete,
                embedding
            from {TABLE}
        ),
        measured as (
            select
                document_id,
                dimension,
                case when is_complete then array_inner_product(embedding, embedding) end
                    as squared_norm
            from vectors
        )
        select
            measured.document_id,
            measured.document_id in (select document_id from duplicate_ids) as is_duplicate_id,
            documents.document_kind,
            measured.dimension,
            coalesce(isfinite(measured.squared_norm), false) as is_finite,
            abs(sqrt(measured.squared_norm::double) - 1) as norm_error
        from measured
        left join documents on measured.document_id = documents.document_id
    """
    yield from chunks(artifact, sql, table_facts(artifact.conn, TABLE))
