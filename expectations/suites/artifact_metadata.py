"""`artifact_metadata`: exactly one row that describes the artifact consistently.

Its counts are the yardstick the other suites measure their tables against, so this
suite checks they agree with each other (the recorded `vector_coverage` is the tables'
share of messages with a vector) and did not drop further below the previously
published artifact's than the settings allow (growth always passes).
"""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, param, signature_sql

TABLE = "artifact_metadata"
ID_COLUMNS = ["build_id"]
DRIFT_RULE = (
    "dropped by no more than max_count_drift of the published artifact's "
    "(or count_drift_min_drop); to publish a deliberate larger drop, "
    "set SLACKQUERY_MAX_COUNT_DRIFT=1 for this build"
)
REQUIRED_FTS_KEYS = ("stemmer", "stopwords", "ignore", "lower", "strip_accents", "index_schema")


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the metadata row and its derived consistency flags."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        gxe.ExpectTableRowCountToEqual(value=1, description="exactly one metadata row"),
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToMatchRegex(
            column="build_id",
            regex=r"^\d{8}T\d{6}Z-[0-9a-f]{8}-[0-9a-f]{8}$",
            description="build id has the YYYYmmddTHHMMSSZ-<watermark>-<uuid> shape",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="schema_version",
            value_set=param("schema_versions"),
            description="artifact schema version is the one this code serves",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="generation_matches",
            value_set=[True],
            description="generation_id equals the id inside generation_json",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="counts_add_up",
            value_set=[True],
            description="document_count = message_count + thread_context_count",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="vectors_within_messages",
            value_set=[True],
            description="vector_count <= message_count",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="coverage_matches_tables",
            value_set=[True],
            description="vector_coverage = document_vectors rows / message documents",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="fts_config_complete",
            value_set=[True],
            description="fts_config_json records the whole tokenizer configuration",
        ),
        gxe.ExpectColumnValuesToNotBeNull(
            column="source_watermark", description="source watermark recorded"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="document_count",
            min_value=param("min_document_count"),
            description=f"document count {DRIFT_RULE}",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="message_count",
            min_value=param("min_message_count"),
            description=f"message count {DRIFT_RULE}",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="message_count", min_value=1, description="at least one message document"
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """The metadata row(s) plus consistency flags computed in SQL."""
    fts_keys = " and ".join(
        f"json_extract(fts_config_json, '$.{key}') is not null" for key in REQUIRED_FTS_KEYS
    )
    yield artifact.conn.execute(
        f"""
        select
            build_id, schema_version, generation_id, source_watermark,
            document_count, message_count, thread_context_count, vector_count,
            vector_coverage,
            {signature_sql(TABLE)} as schema_signature,
            coalesce(json_extract_string(generation_json, '$.generation_id') = generation_id,
                false) as generation_matches,
            coalesce(document_count = message_count + thread_context_count, false)
                as counts_add_up,
            coalesce(vector_count <= message_count, false) as vectors_within_messages,
            coalesce(vector_coverage = coalesce(
                (select count(*) from document_vectors)::double / nullif(
                    (select count(*) from search_documents where document_kind = 'message'), 0
                ),
                1.0
            ), false) as coverage_matches_tables,
            coalesce({fts_keys}, false) as fts_config_complete
        from artifact_metadata
        """
    ).df()
