"""Loading an artifact: vectors streamed into row order, DuckDB's memory capped afterwards."""

from pathlib import Path

import numpy as np
import pytest

import serving.artifact
from serving.artifact import LoadedArtifact
from slackquery.artifacts import files
from slackquery.artifacts.build import build_artifact
from slackquery.duckdb_setup import connect
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import synthesize_state


def test_streamed_vectors_land_in_row_order_and_duckdb_memory_is_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=5000)
    path = files.artifact_file(settings.artifact_path, build_artifact(settings))
    reference = connect(str(path), read_only=True)
    try:
        table = reference.execute(
            "select document_id, embedding from document_vectors order by document_id"
        ).fetchnumpy()
    finally:
        reference.close()
    # One DuckDB vector (2,048 rows) per fetch: the ~4,900 vectors arrive in three chunks.
    monkeypatch.setattr(serving.artifact, "VECTOR_FETCH_CHUNKS", 1)
    artifact = LoadedArtifact(path)
    try:
        expected_rows = np.array([artifact.row_of[doc] for doc in table["document_id"]])
        assert len(expected_rows) > 2 * 2048
        np.testing.assert_array_equal(artifact.vector_rows, expected_rows)
        np.testing.assert_array_equal(artifact.vectors, np.stack(table["embedding"]))
        assert artifact.vectors.flags["C_CONTIGUOUS"] and artifact.vectors.dtype == np.float32
        limit = artifact.cursor().execute("select current_setting('memory_limit')").fetchone()
        assert limit == ("1.0 GiB",)
    finally:
        artifact.close()
