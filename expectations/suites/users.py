"""`users`: one row per author of a searchable document, every author listed."""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, signature_sql

TABLE = "users"
ID_COLUMNS = ["workspace_id", "user_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over the user listing."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
        gxe.ExpectColumnValuesToNotBeNull(column="user_id", description="ids non-null"),
        gxe.ExpectColumnValuesToNotBeNull(column="workspace_id", description="workspace known"),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=ID_COLUMNS, description="one row per workspace and user"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="unlisted_authors",
            max_value=0,
            description="every author of a document is listed (`from:@name` resolves them)",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """The whole table (one row per author; small next to the documents)."""
    yield artifact.conn.execute(
        f"""
        select *, {signature_sql(TABLE)} as schema_signature,
            (
                select count(*)
                from (
                    select distinct workspace_id, author_id from search_documents
                    where author_id is not null
                ) as authors
                anti join {TABLE} as listed
                    on authors.workspace_id = listed.workspace_id
                    and authors.author_id = listed.user_id
            ) as unlisted_authors
        from {TABLE}
        """
    ).df()
