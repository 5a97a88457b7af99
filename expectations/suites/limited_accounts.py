"""`limited_accounts`: the accounts serving limits (deactivated: nothing; guest: only the
conversations it is a member of).

Most archives have none, so the checks read one row of whole-table facts: a batch of the
table's own rows would be empty, and an empty batch passes every expectation, the
contract's included."""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, signature_sql
from slackquery.artifacts.schema import ACCOUNT_LIMITS

TABLE = "limited_accounts"
ID_COLUMNS = ["table_rows"]  # the one row's: a failure names how many rows were checked


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the limited accounts, as one row of counts."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToBeBetween(
            column="rows_without_ids", max_value=0, description="ids non-null"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="repeated_rows", max_value=0, description="one row per workspace and user"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="unknown_limits",
            max_value=0,
            description=f"every limit is one serving knows ({', '.join(ACCOUNT_LIMITS)})",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """One row: the table's signature, and its rows without ids, repeated or of a limit
    serving does not know (an account it would show everything)."""
    yield artifact.conn.execute(
        f"""
        select
            count(*) as table_rows,
            count(*) filter (where workspace_id is null or user_id is null) as rows_without_ids,
            count(*) - count(distinct (workspace_id, user_id)) as repeated_rows,
            count(*) filter (
                where account_limit is null or account_limit not in {ACCOUNT_LIMITS}
            ) as unknown_limits,
            {signature_sql(TABLE)} as schema_signature
        from {TABLE}
        """
    ).df()
