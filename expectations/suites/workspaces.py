"""`workspaces`: one row per workspace that has searchable documents, each listed."""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, signature_sql

TABLE = "workspaces"
ID_COLUMNS = ["workspace_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the scope listing of workspaces."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        gxe.ExpectTableRowCountToBeBetween(min_value=1, description="at least one workspace"),
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToNotBeNull(column="workspace_id", description="ids non-null"),
        gxe.ExpectColumnValuesToBeUnique(column="workspace_id", description="ids unique"),
        gxe.ExpectColumnValuesToNotBeNull(column="workspace_slug", description="slug known"),
        gxe.ExpectColumnValuesToBeBetween(
            column="unlisted_workspaces",
            max_value=0,
            description="every document's workspace is listed",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """The whole (small) table."""
    yield artifact.conn.execute(
        f"""
        select *, {signature_sql(TABLE)} as schema_signature,
            (
                select count(distinct workspace_id) from search_documents
                where workspace_id not in (select workspace_id from {TABLE})
            ) as unlisted_workspaces
        from {TABLE}
        """
    ).df()
