"""Crash safety: SIGKILL a build or publish at named points, then check nothing broke.

Each crash runs the real CLI in a subprocess with SLACKQUERY_TEST_CRASH_AT set. After
every kill the published artifact is unchanged and valid, leftovers are never taken for
artifacts, and the next build + publish produces the same content as an uninterrupted run.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from slackquery.artifacts import files, history, validate
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.commands.artifacts import list_artifacts
from slackquery.crash import CRASH_ENV
from slackquery.duckdb_setup import connect
from slackquery.settings import Settings
from tests.artifacts.conftest import pipeline_env

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONTENT_SQL = """
select
    (select md5(string_agg(document_id || text_lexical, '|' order by document_id))
        from search_documents),
    (select md5(string_agg(document_id || embedding::varchar, '|' order by document_id))
        from document_vectors),
    (select source_watermark || generation_id || document_count from artifact_metadata)
"""


def _cli(settings: Settings, crash_at: str, *args: str) -> int:
    env = {**os.environ, **pipeline_env(settings.home), CRASH_ENV: crash_at}
    process = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return process.returncode


def _content(path: Path) -> tuple:
    conn = connect(str(path), read_only=True)
    try:
        row = conn.execute(CONTENT_SQL).fetchone()
    finally:
        conn.close()
    assert row is not None
    return tuple(row)


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
    expected = _content(files.artifact_file(settings.artifact_path, baseline))

    for point in ("after_tmp_write", "during_validation"):
        assert _cli(settings, point, "build") == -signal.SIGKILL, point
        _assert_published_intact(settings, baseline)
        assert len(list(settings.artifact_path.glob("*.tmp"))) == 1, "left for the next build"

    rebuilt = build_artifact(settings)  # marks the killed builds failed, drops their .tmp
    assert not list(settings.artifact_path.glob("*.tmp"))
    statuses = {row["build_id"]: row for row in list_artifacts(settings)}
    interrupted = [row for key, row in statuses.items() if key not in (baseline, rebuilt)]
    # Marked failed by the next build, then superseded by the retry of the same inputs.
    assert [row["status"] for row in interrupted] == ["superseded", "superseded"]
    assert all("interrupted" in row["error_message"] for row in interrupted)

    assert _cli(settings, "before_swap", "publish", rebuilt) == -signal.SIGKILL
    _assert_published_intact(settings, baseline)
    assert _cli(settings, "after_swap", "publish", rebuilt) == -signal.SIGKILL
    _assert_published_intact(settings, rebuilt)  # the swap itself is the commit point

    result = publish(settings, rebuilt)  # history catches up with the pointer
    assert result["previous"] == f"search-{rebuilt}.duckdb"
    assert _content(files.artifact_file(settings.artifact_path, rebuilt)) == expected
    conn = connect(str(settings.state_path), read_only=True)
    try:
        rows = {row["build_id"]: row["status"] for row in history.list_builds(conn)}
    finally:
        conn.close()
    assert rows[rebuilt] == "published" and rows[baseline] == "superseded"
    assert not any(
        name.startswith(".current.duckdb.") for name in os.listdir(settings.artifact_path)
    )
