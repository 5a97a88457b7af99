"""`search_documents`: every active document once, indexed, non-blank, vectors as needed.

Checked per batch with SQL-computed flags: id duplicates, how many vectors each document
has (at most one per message, none per thread context), whether the FTS index has it. One query
computes them all in a single pass and streams its result in batches.
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
from slackquery.artifacts import schema

TABLE = "search_documents"
ID_COLUMNS = ["document_id"]
KINDS = ["message", "thread_context"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per document."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
        equals_metadata("table_rows", "document_count", "row count"),
        gxe.ExpectColumnValuesToBeBetween(
            column="message_rows",
            min_value=param("message_count"),
            max_value=param("message_count"),
            description="message documents equal artifact_metadata.message_count",
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="document_id", description="ids are non-null"),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_duplicate_id", value_set=[False], description="ids are unique"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="document_kind", value_set=KINDS, description="known document kind"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="vector_count",
            value_set=[0, 1],
            row_condition='document_kind=="message"',
            condition_parser="pandas",
            description="a message document has at most one vector",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="vector_count",
            value_set=[0],
            row_condition='document_kind=="thread_context"',
            condition_parser="pandas",
            description="no vector for a thread context document",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_fts_indexed",
            value_set=[True],
            description="the FTS index covers every document",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_blank_text", value_set=[False], description="no blank document text"
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Per-document flags from one streamed query; table facts computed once."""
    indexed = (
        f"documents.document_id in (select name from {schema.FTS_SCHEMA}.docs)"
        if artifact.has_fts
        else "false"
    )
    facts = table_facts(
        artifact.conn,
        TABLE,
        "count(*) filter (where document_kind = 'message') as message_rows",
    )
    sql = f"""
        with duplicate_ids as (
            select document_id from {TABLE} group by 1 having count(*) > 1
        ),
        vectors as (
            select document_id, count(*) as vector_count from document_vectors group by 1
        )
        select
            documents.document_id,
            documents.document_kind,
            documents.document_id in (select document_id from duplicate_ids) as is_duplicate_id,
            coalesce(vectors.vector_count, 0) as vector_count,
            {indexed} as is_fts_indexed,
            (trim(coalesce(documents.text_lexical, '')) = ''
                or trim(coalesce(documents.text_display, '')) = '') as is_blank_text
        from {TABLE} as documents
        left join vectors on documents.document_id = vectors.document_id
    """
    yield from chunks(artifact, sql, facts)
