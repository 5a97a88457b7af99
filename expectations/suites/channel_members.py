"""`channel_members`: who belongs to which conversation, the input of serving's visibility.

A private channel, DM or group DM without members would be invisible to every requester,
and a member id that is neither a user of the workspace nor a recorded external user
(another workspace of the archive) would be a grant nobody can be given: both fail.
"""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, matches_contract, signature_sql

TABLE = "channel_members"
ID_COLUMNS = ["workspace_id", "channel_id", "user_id"]


def build_suite() -> gx.ExpectationSuite:
    """Expectations over memberships, one batch row per membership or member-less channel."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        matches_contract(TABLE),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=ID_COLUMNS, description="one row per conversation and member"
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_restricted_without_members",
            value_set=[False],
            description="every private channel, DM and group DM has at least one member",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="is_known_member",
            value_set=[True],
            description="member ids exist as users of the workspace or are recorded as external",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Every membership, plus one row (user_id null) per restricted channel without any."""
    yield artifact.conn.execute(
        f"""
        with memberless as (
            select channels.workspace_id, channels.channel_id, channels.conversation_type
            from channels
            anti join {TABLE} as members
                on channels.workspace_id = members.workspace_id
                and channels.channel_id = members.channel_id
            where channels.conversation_type <> 'public'
        )
        select workspace_id, channel_id, conversation_type, user_id,
            false as is_restricted_without_members,
            is_workspace_user or is_external as is_known_member,
            {signature_sql(TABLE)} as schema_signature
        from {TABLE}
        union all
        select workspace_id, channel_id, conversation_type, null, true, true,
            {signature_sql(TABLE)}
        from memberless
        """
    ).df()
