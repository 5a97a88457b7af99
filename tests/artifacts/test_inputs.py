"""slackquery.artifacts.inputs: what a build refuses to read from the state database."""

import re
from pathlib import Path

import duckdb
import pytest

from slackquery.artifacts.build import COPIED_MARTS
from slackquery.artifacts.inputs import require_marts, source_watermark
from slackquery.errors import SlackqueryError
from slackquery.projection import PROJECTION_RUNS_DDL, project_fingerprint


def _state(
    path: Path, *outcomes: tuple[str, str | None], fingerprint: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A state whose projections ended so, of these models (or of `fingerprint`'s)."""
    connection = duckdb.connect(str(path))
    connection.execute("create table search_documents (document_id varchar)")
    connection.execute(PROJECTION_RUNS_DDL)
    for minute, (outcome, failure) in enumerate(outcomes):
        connection.execute(
            "insert into projection_runs (started_at, fingerprint, outcome, failure, tested) "
            "values (timestamptz '2026-12-06 00:00:00+00' + to_minutes(?), ?, ?, ?, true)",
            [minute, fingerprint or project_fingerprint(), outcome, failure],
        )
    return connection


@pytest.mark.parametrize(
    ("outcome", "failure", "says"),
    [
        ("failed", "dbt build failed at test.slackquery.not_null_x", "failed (dbt build failed"),
        ("running", None, "did not finish"),
    ],
)
def test_a_state_whose_last_projection_did_not_succeed_is_refused(
    tmp_path: Path, outcome: str, failure: str | None, says: str
) -> None:
    # A failed dbt test leaves the tables dbt already wrote: building them would publish them.
    connection = _state(tmp_path / "state.duckdb", ("succeeded", None), (outcome, failure))
    with pytest.raises(SlackqueryError, match=re.escape(f"last `slackquery project` {says}")):
        require_marts(connection, ["search_documents"])


def test_a_state_whose_last_projection_succeeded_is_read(tmp_path: Path) -> None:
    connection = _state(tmp_path / "state.duckdb", ("failed", "x"), ("succeeded", None))
    require_marts(connection, ["search_documents"])
    with pytest.raises(SlackqueryError, match="has no search_users"):
        require_marts(connection, ["search_documents", "search_users"])


def test_models_whose_data_tests_never_passed_here_are_refused(tmp_path: Path) -> None:
    # A model edit with a failing test, projected with --skip-tests, was built and published.
    connection = _state(tmp_path / "state.duckdb", ("succeeded", None))
    connection.execute("update projection_runs set tested = false")
    with pytest.raises(SlackqueryError, match=r"without their data tests \(`slackquery proj"):
        require_marts(connection, ["search_documents"])
    # Repeating a projection whose tests passed (what --skip-tests is for) is built.
    insert = (
        "insert into projection_runs (started_at, fingerprint, outcome, tested) "
        "values (timestamptz '2026-12-05 00:00:00+00' + to_minutes(?), ?, ?, true)"
    )
    connection.execute(insert, [0, project_fingerprint(), "succeeded"])
    require_marts(connection, ["search_documents"])
    # Not once new data failed a test since: --skip-tests passed over the failure.
    connection.execute(insert, [1, project_fingerprint(), "failed"])
    with pytest.raises(SlackqueryError, match="the last projection of these models that ran"):
        require_marts(connection, ["search_documents"])


def test_a_state_projected_from_other_models_is_refused(tmp_path: Path) -> None:
    # An edited model run with dbt directly: built untested, the last projection's record
    # still that of the models before the edit.
    connection = _state(tmp_path / "state.duckdb", ("succeeded", None), fingerprint="before")
    with pytest.raises(SlackqueryError, match=r"models changed since the last `slackquery pro"):
        require_marts(connection, ["search_documents"])


def test_the_watermark_sees_every_mart_an_artifact_copies(tmp_path: Path) -> None:
    # A membership change touches no document: reconcile kept publishing the old members,
    # so a user removed from a private channel went on seeing it.
    connection = _state(tmp_path / "state.duckdb", ("succeeded", None))
    connection.execute("drop table search_documents")
    connection.execute(
        "create table search_documents as select 'W:C:1' as document_id, true as is_active, "
        "'message' as document_kind, 'h1' as payload_hash"
    )
    for mart in COPIED_MARTS[1:]:
        connection.execute(f"create table {mart} as select 'W' as workspace_id, 'U1' as user_id")
    before = source_watermark(connection, COPIED_MARTS)
    assert source_watermark(connection, COPIED_MARTS) == before
    for mart in COPIED_MARTS:
        connection.execute(f"alter table {mart} add column edited boolean default true")
        assert source_watermark(connection, COPIED_MARTS) != before, mart
        connection.execute(f"alter table {mart} drop column edited")
    connection.execute("delete from search_channel_members")
    assert source_watermark(connection, COPIED_MARTS) != before
