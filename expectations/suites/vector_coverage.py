"""`vector_coverage`: the candidate's vector coverage did not go backwards without a reason.

Coverage is `artifact_metadata.vector_coverage`, the share of message documents with a
vector. Against the published artifact (publish and build compare with it; a rollback,
a deliberate step back, does not), a candidate passes when any of these holds:

- nothing is published, or the published artifact has another embedding generation (a
  model switch re-embeds from nothing, so its coverage starts again at 0);
- its share is not lower than the published one's;
- its vector count is at least the published one's minus the active messages that went
  away: `vector_count >= published vector_count - max(0, published message_count -
  message_count)`. New messages lower the share without losing a vector, and deleted
  messages take their vectors with them; both explain a lower share.

Anything else lost vectors of the same generation (state reset, vectors stale after
edits): `slackquery embed` can compute them again, so the candidate is refused rather than
published with semantic ranking that reaches fewer messages than before. The one-row
batch names both coverages in `coverage_change`, which failures report as their sample.
"""

from collections.abc import Iterator
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact
from slackquery.artifacts import schema

TABLE = "vector_coverage"
ID_COLUMNS = ["coverage_change"]
RULE = (
    "vector coverage did not fall below the published artifact's for the same generation "
    "by more than its deleted messages explain; run `slackquery embed` and build again"
)


def build_suite() -> gx.ExpectationSuite:
    """One expectation over the one-row comparison."""
    suite = gx.ExpectationSuite(name=TABLE)
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(column="keeps_coverage", value_set=[True], description=RULE)
    )
    return suite


def _describe(metadata: dict[str, Any], who: str) -> str:
    vectors, messages = int(metadata["vector_count"]), int(metadata["message_count"])
    share = schema.vector_coverage(vectors, messages)
    return (
        f"{who} {metadata['build_id']} covers {share:.1%} ({vectors}/{messages} messages, "
        f"generation {metadata['generation_id']})"
    )


def keeps_coverage(candidate: dict[str, Any], published: dict[str, Any] | None) -> bool:
    """The rule of this module's docstring, over two metadata rows."""
    if published is None or published["generation_id"] != candidate["generation_id"]:
        return True
    vectors, messages = int(candidate["vector_count"]), int(candidate["message_count"])
    before_vectors = int(published["vector_count"])
    before_messages = int(published["message_count"])
    if schema.vector_coverage(vectors, messages) >= schema.vector_coverage(
        before_vectors, before_messages
    ):
        return True
    return vectors >= before_vectors - max(0, before_messages - messages)


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """One row: both coverages in words and whether the candidate keeps coverage."""
    cursor = artifact.conn.execute(
        "select build_id, generation_id, vector_count, message_count from artifact_metadata"
    )
    row = cursor.fetchone()
    assert row is not None  # the checkpoint validates nothing without one metadata row
    candidate = dict(zip([column[0] for column in cursor.description], row, strict=True))
    published = artifact.previous
    change = _describe(candidate, "candidate")
    if published is not None:
        change = f"{_describe(published, 'published')}; {change}"
    yield pd.DataFrame(
        {"coverage_change": [change], "keeps_coverage": [keeps_coverage(candidate, published)]}
    )
