"""The arrays beside an artifact: written as the artifact computes them, sealed, refused when
changed."""

import stat
from pathlib import Path

import numpy as np
import pytest

from slackquery.artifacts import arrays, documents, files, postings, validate
from slackquery.artifacts.arrays import Int8Codes, map_all
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.postings import Postings
from slackquery.artifacts.publish import publish
from slackquery.cli import main
from slackquery.duckdb_setup import connect
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.artifacts.conftest import identity_for
from tests.artifacts.synthetic import current_vectors


def _table(path: Path) -> list[str]:
    """The artifact's document ids in `document_id` order."""
    conn = connect(str(path), read_only=True)
    try:
        ids = conn.execute("select document_id from search_documents").fetchall()
    finally:
        conn.close()
    return sorted(doc for (doc,) in ids)


def test_build_writes_read_only_arrays_in_matrix_order_and_seals_them(
    state_settings: Settings,
) -> None:
    build_id = build_artifact(state_settings)
    path = files.artifact_file(state_settings.artifact_path, build_id)
    folder = files.arrays_dir_of(path)
    assert folder == state_settings.artifact_path / f"search-{build_id}.arrays"
    assert sorted(child.name for child in folder.iterdir()) == sorted(
        f"{name}.npy" for name in arrays.DTYPES
    )
    assert all(stat.S_IMODE(child.stat().st_mode) == 0o444 for child in folder.iterdir())
    assert not list(state_settings.artifact_path.glob("*.tmp"))

    ids = _table(path)
    by_document = current_vectors(
        state_settings.state_path, identity_for(state_settings).generation_id
    )
    mapped = arrays.open_arrays(folder).vectors
    with_vectors = [row for row, doc in enumerate(ids) if doc in by_document]
    np.testing.assert_array_equal(mapped.rows, with_vectors)
    np.testing.assert_array_equal(
        mapped.vectors, np.stack([by_document[ids[row]] for row in with_vectors])
    )
    # The codes are exactly what quantising the matrix in memory gives.
    in_memory = Int8Codes.of(np.array(mapped.vectors))
    np.testing.assert_array_equal(mapped.codes.codes, in_memory.codes)
    np.testing.assert_array_equal(mapped.codes.scales, in_memory.scales)
    np.testing.assert_array_equal(mapped.codes.nibbles, in_memory.nibbles)

    manifest = files.read_json(files.manifest_file(state_settings.artifact_path, build_id))
    assert manifest["arrays"]["folder"] == folder.name
    assert manifest["arrays"]["files"]["vectors"] == {
        "file": "vectors.npy",
        "sha256": files.sha256_file(arrays.array_file(folder, "vectors")),
        "dtype": "float32",
        "shape": [59, 8],
    }
    shapes = {name: entry["shape"] for name, entry in manifest["arrays"]["files"].items()}
    assert set(shapes) == set(arrays.DTYPES)
    assert {name: shapes[name] for name in arrays.VECTOR_DTYPES} == {
        "vectors": [59, 8],
        "vector_codes": [59, 8],
        "vector_scales": [8],
        "vector_nibbles": [59, 32],  # one block of 64 dimensions, padded
        "vector_rows": [59],
    }
    validate.verify_sealed(state_settings.artifact_path, build_id, path)


def test_nibbles_are_the_codes_rounded_to_int4_two_per_byte() -> None:
    # Dimension 70: one whole block of 64 and one padded with zeros (nibble 8).
    codes = np.zeros((3, 70), dtype=np.int8)
    codes[0, :] = 127
    codes[1, :] = -127
    codes[2, [0, 31, 32, 63, 64, 69]] = [9, -10, 26, -27, 127, 1]
    nibbles = arrays.pack_nibbles(codes)
    assert nibbles.dtype == np.uint8 and nibbles.shape == (3, arrays.nibble_width(70)) == (3, 64)
    low, high = (nibbles & 0x0F).astype(int) - 8, (nibbles >> 4).astype(int) - 8
    # Block b, byte k: dimension 64b + k low, 64b + 32 + k high.
    unpacked = np.concatenate([low[:, :32], high[:, :32], low[:, 32:], high[:, 32:]], axis=1)
    np.testing.assert_array_equal(unpacked[:, 70:], 0)
    np.testing.assert_array_equal(unpacked[0, :70], 7)
    np.testing.assert_array_equal(unpacked[1, :70], -7)
    # round(code * 7 / 127): 9 -> 0.496 -> 0, -10 -> -0.55 -> -1, 26 -> 1.43 -> 1, -27 -> -1.
    assert unpacked[2, [0, 31, 32, 63, 64, 69]].tolist() == [0, -1, 1, -1, 7, 0]
    assert np.count_nonzero(unpacked[2]) == 4


def test_postings_and_document_arrays_are_what_the_artifact_computes(
    state_settings: Settings,
) -> None:
    path = files.artifact_file(state_settings.artifact_path, build_artifact(state_settings))
    written = map_all(files.arrays_dir_of(path))
    conn = connect(str(path), read_only=True)
    try:
        expected = {**Postings.from_fts(conn).arrays(), **documents.document_arrays(conn)[0]}
    finally:
        conn.close()
    assert set(expected) == set(postings.DTYPES) | set(documents.DTYPES)
    for name, array in expected.items():
        np.testing.assert_array_equal(written[name], array, err_msg=name)
    opened = arrays.open_arrays(files.arrays_dir_of(path))
    assert list(opened.postings.terms) == sorted(opened.postings.terms)
    ids = list(opened.documents.document_ids)
    assert ids == sorted(ids) == _table(path)


def test_a_reply_points_at_its_root_and_one_whose_root_was_never_exported_at_none(
    state_settings: Settings,
) -> None:
    conn = connect(str(state_settings.state_path))
    try:
        replies = conn.execute(
            "select document_id, thread_root_id from search_documents "
            "where is_thread_reply and is_active order by document_id"
        ).fetchall()
        orphan = replies[0][0]
        # What int_messages__threaded gives a reply whose root left no message behind.
        conn.execute(
            "update search_documents set thread_root_id = document_id where document_id = ?",
            [orphan],
        )
    finally:
        conn.close()
    path = files.artifact_file(state_settings.artifact_path, build_artifact(state_settings))
    opened = arrays.open_arrays(files.arrays_dir_of(path)).documents
    row_of = {doc: row for row, doc in enumerate(opened.document_ids)}
    reply_roots = opened.arrays["reply_roots"]
    assert reply_roots[row_of[orphan]] == -1
    for reply, root in replies[1:]:
        assert reply_roots[row_of[reply]] == row_of[root]
    root = row_of[replies[1][1]]
    answers, owners = opened.replies_of(np.array([root]))
    expected = sorted(row_of[reply] for reply, of in replies[1:] if of == replies[1][1])
    assert answers.tolist() == expected and owners.tolist() == [0] * len(expected)


def test_every_display_record_decodes_to_its_row_of_the_table(state_settings: Settings) -> None:
    conn = connect(str(state_settings.state_path))
    conn.execute(
        "update search_documents set author_name = 'Zoë 🚀', text_display = 'naïve: 日本語' "
        "where document_id = (select min(document_id) from search_documents)"
    )
    conn.close()
    path = files.artifact_file(state_settings.artifact_path, build_artifact(state_settings))
    display = arrays.open_arrays(files.arrays_dir_of(path)).documents.display()
    conn = connect(str(path), read_only=True)
    try:
        rows = conn.execute(
            f"select {', '.join(documents.DISPLAY_COLUMNS)} from search_documents "
            "order by document_id"
        ).fetchall()
    finally:
        conn.close()
    decoded = [display.row(row) for row in range(len(rows))]
    assert decoded == [dict(zip(documents.DISPLAY_COLUMNS, row, strict=True)) for row in rows]
    # The fixture holds what each encoding must survive: nulls, both booleans, non-ASCII.
    values = [value for record in decoded for value in record.values()]
    assert None in values and True in values and False in values
    assert any(isinstance(value, str) and not value.isascii() for value in values)


def _flip_last_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_changed_or_missing_array_makes_the_build_unsealed(state_settings: Settings) -> None:
    build_id = build_artifact(state_settings)
    artifact_dir = state_settings.artifact_path
    path = files.artifact_file(artifact_dir, build_id)
    folder = files.arrays_dir_of(path)
    codes = arrays.array_file(folder, "vector_codes")
    original = codes.read_bytes()

    _flip_last_byte(codes)
    with pytest.raises(SlackqueryError, match=r"not sealed: checksum mismatch .*/vector_codes"):
        validate.verify_sealed(artifact_dir, build_id, path)
    with pytest.raises(SlackqueryError, match="not sealed"):
        publish(state_settings, build_id)

    scores = arrays.array_file(folder, "postings.scores")
    scores_before = scores.read_bytes()
    _flip_last_byte(scores)
    with pytest.raises(SlackqueryError, match=r"not sealed: checksum mismatch .*/postings\.scores"):
        validate.verify_sealed(artifact_dir, build_id, path)
    scores.write_bytes(scores_before)

    codes.unlink()
    with pytest.raises(SlackqueryError, match=r"vector_codes\.npy is missing"):
        validate.verify_sealed(artifact_dir, build_id, path)
    codes.write_bytes(original)
    validate.verify_sealed(artifact_dir, build_id, path)

    manifest_path = files.manifest_file(artifact_dir, build_id)
    manifest = files.read_json(manifest_path)
    files.write_json_atomic(manifest_path, {**manifest, "arrays": None})
    with pytest.raises(SlackqueryError, match="built by an older version"):
        validate.verify_sealed(artifact_dir, build_id, path)
    recorded = manifest["arrays"]
    for arrays_entry in (
        ["vectors"],
        {**recorded, "files": ["vectors"]},
        {**recorded, "files": {name: entry["sha256"] for name, entry in recorded["files"].items()}},
    ):
        files.write_json_atomic(manifest_path, {**manifest, "arrays": arrays_entry})
        with pytest.raises(SlackqueryError, match="the manifest names other arrays"):
            validate.verify_sealed(artifact_dir, build_id, path)
    files.write_json_atomic(manifest_path, manifest)

    extra = folder / "notes.txt"  # "exactly the arrays the manifest recorded"
    extra.write_text("not an array\n", encoding="utf-8")
    with pytest.raises(SlackqueryError, match="hold files the manifest does not record: notes"):
        validate.verify_sealed(artifact_dir, build_id, path)
    extra.unlink()
    assert publish(state_settings, build_id)["build_id"] == build_id


def test_a_manifest_that_is_not_an_object_is_one_line(
    state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    build_id = build_artifact(state_settings)
    publish(state_settings, build_id)
    manifest_path = files.manifest_file(state_settings.artifact_path, build_id)
    names = {"build_id": build_id, "artifact_file": f"search-{build_id}.duckdb"}
    for manifest, said in (
        ([], f"manifest of build {build_id} is not a JSON object"),
        ({**names, "validation": [True]}, f"build {build_id} did not pass validation"),
    ):
        files.write_json_atomic(manifest_path, manifest)
        assert main(["rollback", build_id]) == 1
        assert capsys.readouterr().err == f"error: {said}\n"
