"""slackquery.artifacts.inputs: what a build refuses to read from the state database."""

import re
from pathlib import Path

import duckdb
import pytest

from slackquery.artifacts.inputs import require_marts
from slackquery.errors import SlackqueryError
from slackquery.projection import PROJECTION_RUNS_DDL


def _state(path: Path, *outcomes: tuple[str, str | None]) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect(str(path))
    connection.execute("create table search_documents (document_id varchar)")
    connection.execute(PROJECTION_RUNS_DDL)
    for minute, (outcome, failure) in enumerate(outcomes):
        connection.execute(
            "insert into projection_runs values "
            "(timestamptz '2026-12-06 00:00:00+00' + to_minutes(?), 'f', ?, ?)",
            [minute, outcome, failure],
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
