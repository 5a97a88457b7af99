"""Loading an artifact: vectors, postings and per-document columns mapped from the build's
arrays, DuckDB's memory capped."""

import mmap
from pathlib import Path

import numpy as np
import pytest

from serving.artifact import LoadedArtifact
from slackquery.artifacts import arrays, files
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.packed import SortedKeys
from slackquery.errors import SlackqueryError
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import current_vectors, synthesize_state


def _is_mapped(array: np.ndarray) -> bool:
    """Whether `array` views a file map (a memmap, or an array over one) and owns nothing."""
    base = array
    while base is not None:
        if isinstance(base, np.memmap | mmap.mmap):
            return True
        base = base.base
    return False


def test_vectors_are_read_only_maps_in_row_order_and_duckdb_memory_is_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=5000)
    path = files.artifact_file(settings.artifact_path, build_artifact(settings))
    generation_id = identity_for(settings).generation_id
    state = sorted(current_vectors(settings.state_path, generation_id).items())
    artifact = LoadedArtifact(path)
    try:
        expected_rows = np.array([artifact.row_of[doc] for doc, _ in state])
        np.testing.assert_array_equal(artifact.vector_rows, expected_rows)
        np.testing.assert_array_equal(artifact.vectors, np.stack([vector for _, vector in state]))
        assert artifact.vector_scan is not None
        mapped = (
            artifact.vectors,
            artifact.vector_rows,
            artifact.vector_scan.codes.codes,
            artifact.vector_scan.codes.scales,
            artifact.vector_scan.codes.nibbles,
        )
        assert all(_is_mapped(array) and not array.flags["WRITEABLE"] for array in mapped)
        assert artifact.vectors.flags["C_CONTIGUOUS"] and artifact.vectors.dtype == np.float32
        # A filter's rows map to the matrix positions of their message vectors.
        vector_rows = artifact.vector_rows
        assert np.count_nonzero(~artifact.is_message) > 0  # thread contexts, no vectors
        for seed in range(3):
            mask = np.random.default_rng(seed).random(artifact.row_count) < 0.3
            np.testing.assert_array_equal(
                artifact.message_vector_positions(mask),
                np.flatnonzero(mask[vector_rows] & artifact.is_message[vector_rows]),
            )
        postings = artifact.bm25.postings
        per_row = (
            postings.rows,
            postings.scores,
            postings.impact_rows,
            postings.offsets,
            artifact.ts_us,
            artifact.channel_codes,
            artifact.thread_keys,
            artifact.is_message,
        )
        assert all(_is_mapped(array) and not array.flags["WRITEABLE"] for array in per_row)
        # Ids and terms are looked up by binary search over the maps, not held in dicts.
        assert all(
            isinstance(mapping, SortedKeys) for mapping in (artifact.row_of, artifact.bm25.term_ids)
        )
        ids = [doc for doc, _ in state]
        assert [artifact.row_of[doc] for doc in ids] == expected_rows.tolist()
        assert "no such document" not in artifact.row_of
        limit = artifact.cursor().execute("select current_setting('memory_limit')").fetchone()
        assert limit == ("1.0 GiB",)
    finally:
        artifact.close()
    # Arrays that belong to another build (here: one position short) are refused.
    folder = files.arrays_dir_of(path)
    folder.chmod(0o755)
    for name in ("vectors", "vector_codes", "vector_nibbles", "vector_rows"):
        file = arrays.array_file(folder, name)
        file.chmod(0o644)
        np.save(file, np.load(file)[:-1])
    with pytest.raises(SlackqueryError, match="vector arrays of another build"):
        LoadedArtifact(path)
    # So are postings whose arrays disagree on their lengths.
    scores = arrays.array_file(folder, "postings.scores")
    scores.chmod(0o644)
    np.save(scores, np.load(scores)[:-1])
    with pytest.raises(SlackqueryError, match="disagree on their shapes"):
        LoadedArtifact(path)
    arrays.remove(folder)
    with pytest.raises(SlackqueryError, match="build and publish a new artifact"):
        LoadedArtifact(path)
