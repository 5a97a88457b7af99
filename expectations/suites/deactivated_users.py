"""`deactivated_users`: the accounts Slack has deactivated, who see nothing when they ask.

Most archives have none, so the checks read one row of whole-table facts: a batch of the
table's own rows would be empty, and an empty batch passes every expectation, the
contract's included."""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, signature_sql

TABLE = "deactivated_users"
ID_COLUMNS = ["table_rows"]  # the one row's: a failure names how many rows were checked


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the deactivated accounts, as one row of counts."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToBeBetween(
            column="rows_without_ids", max_value=0, description="ids non-null"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="repeated_rows", max_value=0, description="one row per workspace and user"
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """One row: the table's signature, and its rows without ids or repeated."""
    yield artifact.conn.execute(
        f"""
        select
            count(*) as table_rows,
            count(*) filter (where workspace_id is null or user_id is null) as rows_without_ids,
            count(*) - count(distinct (workspace_id, user_id)) as repeated_rows,
            {signature_sql(TABLE)} as schema_signature
        from {TABLE}
        """
    ).df()
