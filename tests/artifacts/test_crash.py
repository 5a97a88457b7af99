"""Crash safety: SIGKILL a build or publish at named points, then check nothing broke.

Each crash runs the real CLI in a subprocess with SLACKQUERY_TEST_CRASH_AT set. After
every kill the published artifact is unchanged and valid, leftovers are never taken for
artifacts, and the next build + publish produces the same content as an uninterrupted run.
"""

import os
import signal

from slackquery.artifacts import files, history, validate
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish, record_pointer
from slackquery.commands.artifacts import list_artifacts
from slackquery.duckdb_setup import connect
from slackquery.settings import Settings
from tests.artifacts.conftest import pipeline_env
from tests.crashing import artifact_content, run_cli_until


def _assert_published_intact(settings: Settings, build_id: str) -> None:
    path = current_artifact(settings)
    assert path == files.artifact_file(settings.artifact_path, build_id).resolve()
    validate.verify_sealed(settings.artifact_path.resolve(), build_id, path)
    listed = {row["build_id"] for row in list_artifacts(settings)}
    for leftover in settings.artifact_path.iterdir():
        if files.build_id_of(leftover) is None:
            continue  # .tmp files, manifests, locks: never artifact names
        assert files.build_id_of(leftover) in listed


def test_sigkill_during_build_and_publish_leaves_current_valid(state_settings: Settings) -> None:
    settings = state_settings
    baseline = build_artifact(settings)
    publish(settings, baseline)
    expected = artifact_content(files.artifact_file(settings.artifact_path, baseline))

    for point in ("after_tmp_write", "during_validation"):
        assert run_cli_until(point, pipeline_env(settings.home), "build") == -signal.SIGKILL, point
        _assert_published_intact(settings, baseline)
        # The candidate file and its arrays folder, left for the next build to remove.
        leftovers = sorted(path.name for path in settings.artifact_path.glob("*.tmp"))
        assert [name.split(".", 1)[1] for name in leftovers] == ["arrays.tmp", "duckdb.tmp"]

    rebuilt = build_artifact(settings)  # records the killed builds, drops their .tmp
    assert not list(settings.artifact_path.glob("*.tmp"))
    statuses = {row["build_id"]: row for row in list_artifacts(settings)}
    interrupted = [row for key, row in statuses.items() if key not in (baseline, rebuilt)]
    # Their own status, not `superseded` (published, then replaced: a rollback target).
    assert [row["status"] for row in interrupted] == ["interrupted", "interrupted"]
    assert all("ended before finishing" in row["error_message"] for row in interrupted)

    env = pipeline_env(settings.home)
    assert run_cli_until("before_swap", env, "publish", rebuilt) == -signal.SIGKILL
    _assert_published_intact(settings, baseline)
    assert run_cli_until("after_swap", env, "publish", rebuilt) == -signal.SIGKILL
    _assert_published_intact(settings, rebuilt)  # the swap itself is the commit point

    result = publish(settings, rebuilt)  # history catches up with the pointer
    assert result["previous"] == f"search-{rebuilt}.duckdb"
    assert artifact_content(files.artifact_file(settings.artifact_path, rebuilt)) == expected
    conn = connect(str(settings.state_path), read_only=True)
    try:
        rows = {row["build_id"]: row["status"] for row in history.list_builds(conn)}
    finally:
        conn.close()
    assert rows[rebuilt] == "published" and rows[baseline] == "superseded"
    assert not any(
        name.startswith(".current.duckdb.") for name in os.listdir(settings.artifact_path)
    )


def _unsealed_leftovers(settings: Settings) -> list[str]:
    """Builds with a final-named file or arrays folder but no manifest."""
    artifact_dir = settings.artifact_path
    return sorted(
        row["build_id"]
        for row in list_artifacts(settings)
        if not files.manifest_file(artifact_dir, row["build_id"]).exists()
        and (
            files.artifact_file(artifact_dir, row["build_id"]).exists()
            or files.arrays_dir_of(files.artifact_file(artifact_dir, row["build_id"])).exists()
        )
    )


def test_a_build_killed_after_its_rename_is_cleaned_up_by_the_next_build_or_reconcile(
    state_settings: Settings,
) -> None:
    """Killed between renaming its file and arrays and writing their manifest, a build
    leaves what looks like a rollback target and can never be published. The next build
    removes it, and so does a reconcile with nothing to publish (`record_pointer`), which
    may run hourly for days before new input gives a build."""
    settings = state_settings
    baseline = build_artifact(settings)
    publish(settings, baseline)
    env = pipeline_env(settings.home)

    assert run_cli_until("after_rename", env, "build") == -signal.SIGKILL
    [first] = _unsealed_leftovers(settings)
    assert run_cli_until("after_rename", env, "build") == -signal.SIGKILL
    [second] = _unsealed_leftovers(settings)  # the second build removed the first's
    assert second != first

    removed = record_pointer(settings)
    second_file = files.artifact_file(settings.artifact_path, second)
    assert {second_file.name, files.arrays_dir_of(second_file).name} <= set(removed)
    assert _unsealed_leftovers(settings) == []
    statuses = {row["build_id"]: row["status"] for row in list_artifacts(settings)}
    assert statuses == {baseline: "published", first: "interrupted", second: "interrupted"}
    _assert_published_intact(settings, baseline)
