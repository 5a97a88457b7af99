"""Build, publish, list, roll back and retain artifacts on a tiny synthetic state DB."""

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import duckdb
import numpy as np
import pytest

from expectations.suites.vector_coverage import RULE
from slackquery import projection
from slackquery.artifacts import arrays, files, history, schema, validate
from slackquery.artifacts.build import build_artifact, new_build_id, remove_candidate
from slackquery.artifacts.pointer import swap_current
from slackquery.artifacts.publish import current_artifact, publish, rollback
from slackquery.artifacts.retention import apply_retention
from slackquery.artifacts.validate import ValidationFailed
from slackquery.cli import main
from slackquery.commands.artifacts import list_artifacts
from slackquery.duckdb_setup import connect
from slackquery.embedding import state as work_state
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings, get_settings
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import current_vectors, embed_all, embed_only, synthesize_state
from tests.crashing import held_open


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return conn.execute(
        "select column_name, data_type from duckdb_columns() "
        "where schema_name = 'main' and table_name = ? order by column_index",
        [table],
    ).fetchall()


def _builds(settings: Settings) -> dict[str, dict]:
    conn = connect(str(settings.state_path), read_only=True)
    try:
        return {row["build_id"]: row for row in history.list_builds(conn)}
    finally:
        conn.close()


def test_build_writes_a_sealed_artifact_and_publish_makes_it_current(
    open_umask: None, state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = state_settings
    steps: list[str] = []
    build_id = build_artifact(settings, steps.append)
    assert files.is_build_id(build_id)
    assert steps == [  # what `slackquery build` shows on a terminal as it goes
        "checking its inputs",
        "copying the search tables",
        "building the full-text index (dbt)",
        "sealing the tables",
        "writing the arrays",
        "validating (Great Expectations)",
        "checksumming",
    ]
    path = files.artifact_file(settings.artifact_path, build_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert not list(settings.artifact_path.glob("*.tmp"))
    manifest_path = files.manifest_file(settings.artifact_path, build_id)
    assert stat.S_IMODE(manifest_path.stat().st_mode) == 0o444
    manifest = files.read_json(manifest_path)
    assert manifest["checksum_sha256"] == files.sha256_file(path)
    assert files.read_json(files.validation_file(settings.artifact_path, build_id))["success"]
    assert current_artifact(settings) is None  # built, not published
    # A home holds DMs: every folder the build made is private, dbt's and the arrays' too.
    made = [
        settings.artifact_path,
        files.arrays_dir_of(path),
        settings.home / "dbt",
        *(settings.home / "dbt").iterdir(),
        settings.log_path,
        settings.log_path / "dbt",
    ]
    assert {stat.S_IMODE(folder.stat().st_mode) for folder in made} == {0o700}

    conn = connect(str(path), read_only=True)
    try:
        identity = identity_for(settings)
        for table, columns in schema.TABLE_COLUMNS.items():
            assert _columns(conn, table) == [(c.name, c.type) for c in columns], table
        metadata = conn.execute(
            "select build_id, generation_id, generation_json, fts_config_json, document_count, "
            "message_count, thread_context_count, vector_count from artifact_metadata"
        ).fetchone()
        ids = [
            row[0] for row in conn.execute("select document_id from search_documents").fetchall()
        ]
        hits = conn.execute(
            "select count(*) from (select fts_main_search_documents.match_bm25("
            "document_id, 'err 42') as score from search_documents) where score is not null"
        ).fetchone()
    finally:
        conn.close()
    assert metadata is not None
    assert metadata[0] == build_id and metadata[1] == identity.generation_id
    assert json.loads(metadata[2]) == json.loads(json.dumps(identity.to_dict()))
    fts_config = json.loads(metadata[3])
    assert {key: fts_config[key] for key in projection.fts_config()} == projection.fts_config()
    assert metadata[4:] == (65, 59, 6, 59)  # 60 messages, 1 tombstone, 6 threads
    assert ids == sorted(ids)
    assert hits is not None and hits[0] > 0  # `ERR-42` is indexed as err + 42

    assert main(["publish", build_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["build_id"] == build_id
    assert current_artifact(settings) == path.resolve()
    link = settings.artifact_path / files.CURRENT_NAME
    assert os.readlink(link) == path.name  # relative symlink
    assert main(["artifacts", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(row["build_id"], row["status"], row["is_current"]) for row in listed] == [
        (build_id, "published", True)
    ]
    # Publishing the latest again said to run `build` first, as if none had been built.
    assert main(["publish", "latest"]) == 1
    refusal = capsys.readouterr().err
    assert refusal == (
        "error: no validated build waits to be published; `slackquery build` makes one "
        f"({build_id} is the one published)\n"
    )


def test_coverage_gate_refuses_and_names_missing_counts(state_settings: Settings) -> None:
    settings = state_settings
    conn = connect(str(settings.state_path))
    conn.execute(
        "update embedding_work_items set state = 'pending', embedding = null "
        "where document_id in (select document_id from embedding_work_items limit 2)"
    )
    conn.execute(
        "update embedding_work_items set state = 'terminal_failed' where document_id = "
        "(select min(document_id) from embedding_work_items where state = 'pending')"
    )
    conn.execute(
        "update search_documents set text_hash = 'changed' where document_id = "
        "(select max(document_id) from search_documents where document_kind = 'message' "
        "and is_active)"
    )
    conn.close()
    with pytest.raises(SlackqueryError) as caught:
        build_artifact(settings)
    message = str(caught.value)
    assert "embedding coverage incomplete" in message
    assert "56/59 active message documents" in message
    assert "pending: 1" in message and "stale_text: 1" in message
    assert "terminal_failed: 1" in message and "thread_context: 6 active" in message
    # A terminal item is never claimed again unless asked for.
    assert message.endswith("run `slackquery embed --retry-failed` and build again")
    assert "SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE" not in message  # the default needs all
    assert not any(settings.artifact_path.glob("search-*"))


def test_a_lower_coverage_gate_still_refuses_below_its_share(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE", "0.9")
    embed_only(state_settings.state_path, 36)
    with pytest.raises(SlackqueryError) as caught:
        build_artifact(get_settings())
    message = str(caught.value)
    assert "embedding coverage incomplete" in message and "36/59 active message" in message
    assert "SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE=0.9 needs 90.0%" in message
    assert message.endswith("run `slackquery embed` and build again")


def test_messages_the_endpoint_rejected_for_good_hold_no_publish_back_within_their_share(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One unembeddable message failed every later build, and so every scheduled publish.
    conn = connect(str(state_settings.state_path))
    conn.execute(
        "update embedding_work_items set state = 'terminal_failed', embedding = null "
        "where document_id in (select document_id from embedding_work_items "
        "order by document_id limit 2)"
    )
    conn.close()
    with pytest.raises(SlackqueryError) as caught:  # 2 of 59: over the default 1%
        build_artifact(get_settings())
    assert "SLACKQUERY_ARTIFACT_MAX_REJECTED_SHARE=0.01 lets 0 rejected ones through" in str(
        caught.value
    )
    monkeypatch.setenv("SLACKQUERY_ARTIFACT_MAX_REJECTED_SHARE", "0.04")
    build_id = build_artifact(get_settings())
    (vectors, messages, coverage), _ = _coverage_recorded(state_settings, build_id)
    assert (vectors, messages) == (57, 59) and coverage == pytest.approx(57 / 59)


def _coverage_recorded(settings: Settings, build_id: str) -> tuple[tuple, float]:
    """(vector_count, message_count, vector_coverage) of the metadata; the manifest's share."""
    path = files.artifact_file(settings.artifact_path, build_id)
    conn = connect(str(path), read_only=True)
    try:
        row = conn.execute(
            "select vector_count, message_count, vector_coverage from artifact_metadata"
        ).fetchone()
    finally:
        conn.close()
    manifest = files.read_json(files.manifest_file(settings.artifact_path, build_id))
    return tuple(row or ()), manifest["vector_coverage"]


def test_partial_coverage_publishes_but_never_goes_backwards_in_one_generation(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE", "0.5")
    settings = get_settings()
    identity = identity_for(settings)
    embed_only(settings.state_path, 36)
    partial = build_artifact(settings)
    assert _coverage_recorded(settings, partial) == ((36, 59, 36 / 59), 36 / 59)
    conn = connect(str(settings.state_path))
    embed_all(conn, identity)
    conn.close()
    full = build_artifact(settings)
    publish(settings, full)
    full_path = files.artifact_file(settings.artifact_path, full)

    partial_result = files.validation_file(settings.artifact_path, partial)
    built = partial_result.read_bytes()
    with pytest.raises(ValidationFailed) as caught:
        publish(settings, partial)  # same generation, same messages, 23 vectors fewer
    message = str(caught.value)
    assert f"publish of {partial} refused" in message and RULE in message
    assert f"published {full} covers 100.0% (59/59 messages" in message
    assert f"candidate {partial} covers 61.0% (36/59 messages" in message
    assert current_artifact(settings) == full_path
    # The refusal is kept beside the build's passing result, which stays as it was.
    refused = files.refused_validation_file(settings.artifact_path, partial)
    assert message.endswith(f"(details: {refused.resolve()})")
    assert not files.read_json(refused)["success"]
    assert partial_result.read_bytes() == built
    assert stat.S_IMODE(partial_result.stat().st_mode) == 0o444
    # Asked again with nothing changed (the hourly reconcile), the refusal stands without
    # a checkpoint run (which would replace the file); another drift setting runs it.
    refused_inode = refused.stat().st_ino
    with pytest.raises(ValidationFailed, match=r"refused again \(nothing it was checked"):
        publish(settings, partial)
    assert refused.stat().st_ino == refused_inode
    stricter = settings.model_copy(update={"max_count_drift": 0.01})
    with pytest.raises(ValidationFailed) as rechecked:
        publish(stricter, partial)
    assert "refused again" not in str(rechecked.value)
    assert refused.stat().st_ino != refused_inode

    # A model switch re-embeds from nothing: a lower share of a new generation publishes.
    monkeypatch.setenv("SLACKQUERY_EMBEDDING_MODEL_REVISION", "r2")
    switched = get_settings()
    synthesize_state(switched.state_path, identity_for(switched), messages=60)
    embed_only(switched.state_path, 30)
    other_model = build_artifact(switched)
    publish(switched, other_model)
    assert current_artifact(switched) == files.artifact_file(switched.artifact_path, other_model)
    assert _coverage_recorded(switched, other_model)[1] == 30 / 59


def test_no_coverage_publishes_before_the_embed_flow_ever_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=60, embed=False)
    conn = connect(str(settings.state_path))
    conn.execute("drop table embedding_work_items")
    conn.execute("drop table embedding_generations")
    conn.close()
    with pytest.raises(SlackqueryError, match="no embeddings: run `slackquery embed` first"):
        build_artifact(settings)  # the default still needs every vector

    monkeypatch.setenv("SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE", "0")
    settings = get_settings()
    build_id = build_artifact(settings)
    publish(settings, build_id)
    assert _coverage_recorded(settings, build_id) == ((0, 59, 0.0), 0.0)
    path = files.artifact_file(settings.artifact_path, build_id)
    assert current_artifact(settings) == path
    assert len(arrays.open_arrays(files.arrays_dir_of(path)).vectors.rows) == 0


def test_vectors_follow_the_current_text_and_generation_and_live_only_in_the_arrays(
    state_settings: Settings,
) -> None:
    settings = state_settings
    generation_id = identity_for(settings).generation_id
    expected = current_vectors(settings.state_path, generation_id)
    conn = connect(str(settings.state_path))
    # Decoys the build must skip: an old text's vector, another generation's, a failed row.
    for text_hash, generation, state in (
        ("old-text", generation_id, "succeeded"),
        (None, "other-generation", "succeeded"),
        (None, generation_id, "retryable_failed"),
    ):
        conn.execute(
            "insert into embedding_work_items select document_id, ?, "
            "coalesce(?, text_hash || '-decoy'), ?, 1, null, null, null, null, null, "
            "list_transform(embedding, x -> -x), now(), now() "
            "from embedding_work_items order by document_id limit 5",
            [generation, text_hash, state],
        )
    conn.close()

    path = files.artifact_file(settings.artifact_path, build_artifact(settings))
    conn = connect(str(path), read_only=True)
    try:
        ids = [
            doc for (doc,) in conn.execute("select document_id from search_documents").fetchall()
        ]
        sketches = dict(
            conn.execute("select document_id, vector_sketch from document_vectors").fetchall()
        )
        keys = conn.execute(
            "select table_name from duckdb_constraints() "
            "where constraint_type = 'PRIMARY KEY' and database_name = current_database()"
        ).fetchall()
    finally:
        conn.close()
    mapped = arrays.open_arrays(files.arrays_dir_of(path)).vectors
    by_position = [sorted(ids)[row] for row in mapped.rows]
    assert sorted(by_position) == sorted(expected) == sorted(sketches) and len(expected) == 59
    # Every vector is the current one, none of the decoys; the file holds its sketch only.
    probes = schema.sketch_probes(mapped.vectors.shape[1])
    for position, document in enumerate(by_position):
        np.testing.assert_array_equal(mapped.vectors[position], expected[document])
        np.testing.assert_allclose(sketches[document], probes @ expected[document], atol=1e-6)
    assert keys == [("search_documents",)]  # serving looks documents up by id


def test_a_mart_column_the_artifact_copies_is_checked_by_name(state_settings: Settings) -> None:
    # A model edit that renamed it built nothing but a 28-line DuckDB binder traceback.
    with duckdb.connect(str(state_settings.state_path)) as state:
        state.execute("alter table search_channels rename count_messages to messages")
    with pytest.raises(SlackqueryError) as refused:
        build_artifact(state_settings)
    assert str(refused.value).startswith(
        "the dbt model search_channels has no column count_messages, which the search "
        "artifact copies"
    )
    assert _builds(state_settings) == {}


def test_a_mart_column_of_another_type_is_one_line_naming_the_mart(
    state_settings: Settings,
) -> None:
    # Only search_documents has an enforced contract: a mart's column that no longer casts
    # to its artifact column was a DuckDB conversion traceback naming neither.
    with duckdb.connect(str(state_settings.state_path)) as state:
        state.execute(
            "alter table search_channels alter first_ts_us type timestamp "
            "using make_timestamp(first_ts_us)"
        )
    with pytest.raises(SlackqueryError) as refused:
        build_artifact(state_settings)
    assert str(refused.value).startswith(
        "the dbt model search_channels does not fit the artifact table channels "
        "(slackquery/artifacts/schema.py): Conversion Error"
    )
    # DuckDB's error names the types only.
    assert str(refused.value).endswith(
        "; columns whose types differ: first_ts_us (TIMESTAMP in the model, BIGINT in the artifact)"
    )


def test_failing_suite_marks_build_failed_with_sample_ids(state_settings: Settings) -> None:
    settings = state_settings
    conn = connect(str(settings.state_path))
    bad = conn.execute(
        "select document_id from embedding_work_items order by document_id limit 1"
    ).fetchone()
    assert bad is not None
    conn.execute(
        "update embedding_work_items set embedding = list_transform(embedding, x -> x * 2) "
        "where document_id = ?",
        [bad[0]],
    )
    conn.close()
    with pytest.raises(SlackqueryError) as caught:
        build_artifact(settings)
    assert "vector_arrays: expect_column_values_to_be_between" in str(caught.value)
    assert bad[0] in str(caught.value)
    (build_id, row), *_ = _builds(settings).items()
    assert row["status"] == "failed" and bad[0] in row["error_message"]
    kept = files.read_json(files.validation_file(settings.artifact_path, build_id))
    assert not kept["success"] and kept["failures"][0]["sample"] == [bad[0]]
    assert not files.artifact_file(settings.artifact_path, build_id).exists()
    assert not list(settings.artifact_path.glob("*.tmp"))


def test_rollback_retention_and_refusals(
    state_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = state_settings
    first = build_artifact(settings)
    publish(settings, first)
    synthesize_state(settings.state_path, identity_for(settings), messages=70, seed=1)
    second = build_artifact(settings)
    assert second.split("-")[1] != first.split("-")[1]  # new source watermark
    publish(settings, second)
    first_path = files.artifact_file(settings.artifact_path, first)

    outside = tmp_path / first_path.name
    shutil.copy(first_path, outside)
    with pytest.raises(SlackqueryError, match="must sit directly in"):
        rollback(settings, str(outside))
    with pytest.raises(SlackqueryError, match="a symlink is not an artifact"):
        rollback(settings, str(settings.artifact_path / files.CURRENT_NAME))
    monkeypatch.chdir(tmp_path)  # a bare file name is one in the artifact directory
    with pytest.raises(SlackqueryError, match="a symlink is not an artifact; name the build id"):
        rollback(settings, files.CURRENT_NAME)
    for step in (rollback, publish):  # a mistyped id is named as such
        with pytest.raises(SlackqueryError, match="no build nonsense: not a build id"):
            step(settings, "nonsense")
    with pytest.raises(SlackqueryError, match="`latest` is a publish reference"):
        rollback(settings, "latest")

    manifest_path = files.manifest_file(settings.artifact_path, first)
    manifest = files.read_json(manifest_path)
    files.write_json_atomic(manifest_path, {**manifest, "checksum_sha256": "0" * 64})
    with pytest.raises(SlackqueryError, match="checksum mismatch"):
        rollback(settings, first)
    assert current_artifact(settings) == files.artifact_file(settings.artifact_path, second)
    files.write_json_atomic(manifest_path, manifest)

    result = rollback(settings, first_path.name)
    assert result["validation"]["success"] and result["previous"].endswith(f"{second}.duckdb")
    assert current_artifact(settings) == first_path.resolve()
    statuses = {build_id: row["status"] for build_id, row in _builds(settings).items()}
    assert statuses == {first: "published", second: "superseded"}
    # `publish latest` said to build one, as if the build rolled back from were not there.
    with pytest.raises(SlackqueryError, match=f"rolled back from {second}: `slackquery publish"):
        publish(settings, "latest")

    # A third build: retention keeps current, the one published before it (`first`, just
    # rolled back to) and 1 newest other (SLACKQUERY_RETAIN_ARTIFACTS=1).
    synthesize_state(settings.state_path, identity_for(settings), messages=64, seed=2)
    third = build_artifact(settings)
    outcome = publish(settings, third)
    assert sorted(outcome["retention"]["kept"]) == sorted(
        f"search-{b}.duckdb" for b in (first, second, third)
    )
    # A fourth: `third` is both the previous and the newest other.
    synthesize_state(settings.state_path, identity_for(settings), messages=66, seed=3)
    fourth = build_artifact(settings)
    outcome = publish(settings, fourth)
    assert sorted(outcome["retention"]["kept"]) == [f"search-{b}.duckdb" for b in (third, fourth)]
    assert f"search-{first}.duckdb" in outcome["retention"]["removed"]
    assert not files.manifest_file(settings.artifact_path, first).exists()
    assert not files.arrays_dir_of(first_path).exists()  # the arrays go with their artifact
    assert all(
        files.arrays_dir_of(files.artifact_file(settings.artifact_path, kept)).is_dir()
        for kept in (third, fourth)
    )
    with pytest.raises(SlackqueryError, match=r"no artifact file .* \(retention removes old "):
        rollback(settings, first)


def test_a_small_workspace_that_grows_builds_and_publishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=20)
    small = build_artifact(settings)
    # A newer export with twice the messages: growth is never count drift.
    synthesize_state(settings.state_path, identity_for(settings), messages=40)
    grown = build_artifact(settings)
    small_path = files.artifact_file(settings.artifact_path, small)
    grown_path = files.artifact_file(settings.artifact_path, grown)
    grown_result = files.validation_file(settings.artifact_path, grown)
    built = files.read_json(files.validation_file(settings.artifact_path, small))

    # Both were validated with nothing published: publishing `small` repeats nothing.
    assert publish(settings, small)["validation"] == {"success": True, "reused": True}
    assert files.read_json(files.validation_file(settings.artifact_path, small)) == built
    # `grown` was compared with no published artifact; `small` is current now.
    assert validate.reusable_result(settings, grown_path, grown_result) is None
    assert publish(settings, grown)["validation"] == {"success": True, "reused": False}
    assert files.read_json(grown_result)["inputs"]["previous"] == str(small_path.resolve())
    assert current_artifact(settings) == grown_path

    # Rolling back always validates afresh; the drift settings are inputs too.
    assert rollback(settings, small)["validation"] == {"success": True, "reused": False}
    assert validate.reusable_result(settings, grown_path, grown_result) is not None
    looser = settings.model_copy(update={"max_count_drift": 0.9})
    assert validate.reusable_result(looser, grown_path, grown_result) is None


def test_retention_removes_arrays_folders_of_dead_builds(state_settings: Settings) -> None:
    settings = state_settings
    build_id = build_artifact(settings)
    publish(settings, build_id)
    artifact_dir = settings.artifact_path
    # A build killed between renaming its arrays folder and its file, and one killed
    # while writing its arrays: neither has an artifact file.
    dead = [
        files.arrays_dir_of(
            files.artifact_file(artifact_dir, "20260101T000000Z-00000000-0000dead")
        ),
        files.arrays_dir_of(files.temp_file(artifact_dir, "20260101T000000Z-00000000-0000beef")),
    ]
    for folder in dead:
        folder.mkdir()
        (folder / "vectors.npy").write_bytes(b"partial")
    conn = connect(str(settings.state_path))
    try:
        with files.artifact_lock(artifact_dir):
            removed = apply_retention(settings, conn)["removed"]
    finally:
        conn.close()
    assert sorted(removed) == sorted(folder.name for folder in dead)
    assert not any(folder.exists() for folder in dead)
    assert files.arrays_dir_of(files.artifact_file(artifact_dir, build_id)).is_dir()


def test_a_full_disk_fails_the_build_in_one_line_and_keeps_what_is_published(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The arrays are mapped files: unless their blocks are reserved before they are
    written, a full disk is a SIGBUS that kills the build mid-write."""
    settings = state_settings
    published = build_artifact(settings)
    publish(settings, published)

    def disk_full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", disk_full)
    assert main(["build"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: no space left on device writing ")
    assert ".arrays.tmp/" in error and error.count("\n") == 1
    path = files.artifact_file(settings.artifact_path, published)
    assert current_artifact(settings) == path.resolve()
    validate.verify_sealed(settings.artifact_path, published, path)
    assert not list(settings.artifact_path.glob("*.tmp*"))
    failed = [row for row in _builds(settings).values() if row["status"] == "failed"]
    assert len(failed) == 1 and "No space left on device" in failed[0]["error_message"]


@pytest.mark.parametrize("inside_duckdb", [False, True], ids=["python", "duckdb"])
def test_a_build_stopped_from_outside_is_interrupted_and_names_what_stopped_it(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch, inside_duckdb: bool
) -> None:
    # Prefect's cancel raises a TerminationSignal with no message: it was recorded failed,
    # as "TerminationSignal: ". Ctrl-C while DuckDB copies the tables comes wrapped in
    # DuckDB's error: it was recorded failed, as "RuntimeError: Query interrupted".
    settings = state_settings

    def cancelled(*args: object, **kwargs: object) -> None:
        if inside_duckdb:
            raise RuntimeError("Query interrupted") from KeyboardInterrupt()
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "run_checkpoint", cancelled)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        build_artifact(settings)
    [row] = _builds(settings).values()
    assert (row["status"], row["error_message"]) == ("interrupted", "stopped by KeyboardInterrupt")


def test_a_build_failing_after_its_rename_leaves_no_final_named_files(
    state_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while writing the manifest: the file and arrays already carry their
    final names, and left there they would look like a rollback target."""
    settings = state_settings
    published = build_artifact(settings)
    publish(settings, published)
    write_json_atomic = files.write_json_atomic

    def disk_full_for_manifests(path: Path, payload: object, mode: int | None = None) -> None:
        if path.name.endswith(files.MANIFEST_SUFFIX):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_json_atomic(path, payload, mode)

    monkeypatch.setattr(files, "write_json_atomic", disk_full_for_manifests)
    with pytest.raises(OSError, match="No space left on device"):
        build_artifact(settings)
    [failed] = [key for key, row in _builds(settings).items() if row["status"] == "failed"]
    artifact_dir = settings.artifact_path
    assert not files.artifact_file(artifact_dir, failed).exists()
    assert not files.arrays_dir_of(files.artifact_file(artifact_dir, failed)).exists()
    assert [path.name for path in artifact_dir.glob("search-*.duckdb")] == [
        files.artifact_file(artifact_dir, published).name
    ]


def test_retention_keeps_the_previous_build_and_counts_only_sealed_ones(
    state_settings: Settings,
) -> None:
    settings = state_settings  # SLACKQUERY_RETAIN_ARTIFACTS=1
    artifact_dir = settings.artifact_path
    previous = build_artifact(settings)
    publish(settings, previous)
    sealed = build_artifact(settings)
    unsealed = build_artifact(settings)  # validated, then its manifest lost
    files.manifest_file(artifact_dir, unsealed).unlink()
    current = build_artifact(settings)

    retention = publish(settings, current)["retention"]
    assert sorted(retention["kept"]) == sorted(
        files.artifact_file(artifact_dir, build_id).name for build_id in (previous, sealed, current)
    )
    assert files.artifact_file(artifact_dir, unsealed).name in retention["removed"]
    assert rollback(settings, previous)["build_id"] == previous


def test_publish_refuses_a_file_edited_together_with_its_manifest(
    state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = state_settings
    build_id = build_artifact(settings)
    path = files.artifact_file(settings.artifact_path, build_id)
    path.chmod(0o644)
    conn = duckdb.connect(str(path))
    try:
        conn.execute("update search_documents set text_lexical = 'edited' where text_lexical <> ''")
        conn.execute("checkpoint")
    finally:
        conn.close()
    manifest_path = files.manifest_file(settings.artifact_path, build_id)
    manifest = files.read_json(manifest_path)
    edited = {**manifest, "checksum_sha256": files.sha256_file(path)}
    files.write_json_atomic(manifest_path, {**edited, "size_bytes": path.stat().st_size})
    validate.verify_sealed(settings.artifact_path, build_id, path)  # the two agree

    assert main(["publish", build_id]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: refusing build {build_id}: its file and manifest are not ")
    assert error.count("\n") == 1
    assert current_artifact(settings) is None


def test_artifacts_shows_the_pointers_build_published_when_a_publish_died_after_its_swap(
    state_settings: Settings,
) -> None:
    settings = state_settings
    first = build_artifact(settings)
    publish(settings, first)
    second = build_artifact(settings)
    # What a publish killed right after swapping the pointer leaves: the history behind.
    swap_current(settings.artifact_path, files.artifact_file(settings.artifact_path, second).name)
    assert _builds(settings)[second]["status"] == "validated"
    listed = {
        row["build_id"]: (row["status"], row["is_current"]) for row in list_artifacts(settings)
    }
    assert listed == {first: ("superseded", False), second: ("published", True)}


def test_a_failed_candidate_leaves_no_duckdb_log_behind(tmp_path: Path) -> None:
    build_id = new_build_id("0" * 8)
    temp = files.temp_file(tmp_path, build_id)
    log = temp.with_name(f"{temp.name}.wal")  # what a write that ran out of space leaves
    for path in (temp, log):
        path.write_bytes(b"partial")
    files.arrays_dir_of(temp).mkdir()
    remove_candidate(tmp_path, build_id)
    assert not list(tmp_path.iterdir())


def _insert_building(conn: duckdb.DuckDBPyConnection, settings: Settings) -> str:
    """A `building` row of a new build id, as a build that started records; its id."""
    build_id = new_build_id("0" * 8)
    history.insert_building(
        conn,
        build_id=build_id,
        source_watermark="0" * 8,
        generation_id=identity_for(settings).generation_id,
        artifact_path=str(files.artifact_file(settings.artifact_path, build_id)),
        code_version="test",
    )
    return build_id


def test_a_build_whose_process_is_gone_is_listed_interrupted(
    state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = state_settings
    conn = connect(str(settings.state_path))
    try:
        history.ensure_table(conn)
        build_id = _insert_building(conn, settings)  # as a build killed while it ran leaves it
    finally:
        conn.close()
    assert [row["status"] for row in list_artifacts(settings)] == ["interrupted"]
    assert main(["artifacts"]) == 0
    listed = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[:2] for line in listed] == [[build_id, "interrupted"]]
    # It never had a file: the refusal names its status, not retention.
    for command in ("rollback", "publish"):
        assert main([command, build_id]) == 1
        assert capsys.readouterr().err == (
            f"error: build {build_id} is interrupted; not publishable (only validated, "
            "published and superseded builds are: see `slackquery artifacts`)\n"
        )


def test_failures_an_earlier_version_labelled_superseded_get_their_own_status_back(
    state_settings: Settings,
) -> None:
    settings = state_settings
    conn = connect(str(settings.state_path))
    try:
        history.ensure_table(conn)
        for error in ("interrupted: the build process ended before finishing", "ValueError"):
            build_id = _insert_building(conn, settings)
            # What `supersede_failed` did to a failed build once its inputs were built again.
            conn.execute(
                "update search_builds set status = 'superseded', error_message = ? "
                "where build_id = ?",
                [error, build_id],
            )
        history.ensure_table(conn)  # as the next build or publish does
    finally:
        conn.close()
    statuses = sorted(row["status"] for row in _builds(settings).values())
    assert statuses == ["failed", "interrupted"]


# Holds the database at argv[1] open for writing until its stdin closes.
STATE_COMMANDS = (["build"], ["publish", "latest"], ["artifacts"], ["embedding-status"])


def _state_errors(settings: Settings, capsys: pytest.CaptureFixture[str]) -> set[str]:
    """What each command reading the state (and `embed`'s way in) says when it cannot."""
    said = set()
    for command in STATE_COMMANDS:
        assert main(command) == 1, command
        said.add(capsys.readouterr().err)
    with pytest.raises(SlackqueryError) as refused:
        work_state.connect(settings.state_path)
    said.add(f"error: {refused.value}\n")
    return said


def test_a_busy_or_damaged_state_database_is_one_line_for_every_command(
    state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    path = state_settings.state_path
    with held_open(path) as holder:
        busy = _state_errors(state_settings, capsys)
    assert busy == {
        f"error: state database {path} is busy: another process (PID {holder}) has it "
        "open; retry when it is done\n"
    }
    path.write_text("garbage\n", encoding="utf-8")
    assert _state_errors(state_settings, capsys) == {
        f"error: state database {path} is not a valid DuckDB database file\n"
    }
