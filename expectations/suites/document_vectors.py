"""`document_vectors`: one row per vector of the arrays, naming its document (at most one
per message document; how many messages have one is `artifact_metadata.vector_coverage`)
and carrying its sketch. The vectors themselves are checked where they are, in the arrays
(`vector_arrays`: dimension, finiteness, unit norm, and each row's sketch).
"""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, chunks, equals_metadata, matches_contract, table_facts

TABLE = "document_vectors"
ID_COLUMNS = ["document_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per vector."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
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
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Per-vector duplicate flag and document kind from one streamed query."""
    sql = f"""
        with duplicate_ids as (
            select document_id from {TABLE} group by 1 having count(*) > 1
        )
        select
            vectors.document_id,
            vectors.document_id in (select document_id from duplicate_ids) as is_duplicate_id,
            documents.document_kind
        from {TABLE} as vectors
        left join search_documents as documents on vectors.document_id = documents.document_id
    """
    yield from chunks(artifact, sql, table_facts(artifact.conn, TABLE))
