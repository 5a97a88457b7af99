"""A stand-in published artifact for the evaluation's tests: only what the runner reads."""

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from slackquery.artifacts.pointer import swap_current
from slackquery.settings import Settings

BUILD_ID = "20261206T120000Z-0123abcd-4567ef89"
GENERATION_ID = "test-model@1:d8:message-v2:0123456789ab"


@pytest.fixture
def publish_ids(settings: Settings) -> Callable[..., Path]:
    """Publish, in the test's home, an artifact of `artifact_metadata` and the source message
    ids of `search_documents` (what `runner.artifact_facts` reads), one document each."""

    def publish(*source_ids: str) -> Path:
        settings.artifact_path.mkdir(parents=True, exist_ok=True)
        path = settings.artifact_path / f"search-{BUILD_ID}.duckdb"
        with duckdb.connect(str(path)) as connection:
            connection.execute(
                "create table artifact_metadata as select ? as build_id, ? as generation_id, "
                "? as document_count, ? as message_count, now() as built_at",
                [BUILD_ID, GENERATION_ID, len(source_ids), len(source_ids)],
            )
            connection.execute("create table search_documents (source_message_id varchar)")
            connection.executemany(
                "insert into search_documents values (?)", [[source_id] for source_id in source_ids]
            )
        swap_current(settings.artifact_path, path.name)
        return path

    return publish
