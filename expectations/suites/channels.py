"""`channels`: one row per channel with messages, with counts that add up to the artifact's."""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, param, signature_sql
from slackquery.artifacts import schema

TABLE = "channels"
ID_COLUMNS = ["workspace_id", "channel_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the scope listing of channels."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        gxe.ExpectTableRowCountToBeBetween(min_value=1, description="at least one channel"),
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToNotBeNull(column="channel_id", description="ids non-null"),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=ID_COLUMNS, description="one row per workspace and channel"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="conversation_type",
            value_set=list(schema.CONVERSATION_TYPES),
            description="known conversation type",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="message_count", min_value=1, description="listed channels have messages"
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="last_ts_us",
            column_B="first_ts_us",
            or_equal=True,
            description="first message is not after the last",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="total_messages",
            min_value=param("message_count"),
            max_value=param("message_count"),
            description="channel message counts add up to artifact_metadata.message_count",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """The whole (small) table plus its total message count."""
    yield artifact.conn.execute(
        f"""
        select *, sum(message_count) over () as total_messages,
            {signature_sql(TABLE)} as schema_signature
        from {TABLE}
        """
    ).df()
