"""SIGKILL during import and during projection, then `reconcile`: nothing lost, same result.

The artifact and embedding steps have their own crash tests (tests/artifacts/test_crash.py,
tests/embedding/test_work.py). This one covers the steps in front of them with the real
pipeline on a small sample workspace: a killed import leaves the canonical store exactly
as it was, a projection killed between dbt models leaves state that the next run repairs,
the published artifact stays current and valid throughout, and the next reconcile
publishes the same artifact content as a run that was never interrupted.
"""

import signal
from pathlib import Path

import pytest

from flows.reconcile import reconcile, reconcile_plain
from slackquery.artifacts import files, validate
from slackquery.artifacts.publish import current_artifact
from slackquery.canonical.importer import import_source
from slackquery.sample import generate_sample
from slackquery.settings import Settings, get_settings
from tests.crashing import artifact_content, query_one, run_cli_until

CANONICAL_DIGEST_SQL = """
select count(*), md5(string_agg(message_key || payload_hash || is_deleted::varchar, '|'
    order by message_key))
from messages
"""


def _use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> Settings:
    monkeypatch.setenv("SLACKQUERY_HOME", str(home))
    return get_settings()


def _assert_current_intact(settings: Settings, build_id: str) -> None:
    current = current_artifact(settings)
    assert current is not None and files.build_id_of(current) == build_id
    validate.verify_sealed(settings.artifact_path.resolve(), build_id, current)


@pytest.mark.slow
def test_kills_during_import_and_projection_then_reconcile_matches_uninterrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_export = generate_sample(tmp_path / "week1.zip", messages=150)["path"]
    second_export = generate_sample(tmp_path / "week2.zip", messages=180)["path"]

    # The interrupted history: publish week 1, then die while importing and projecting week 2.
    home = tmp_path / "interrupted"
    settings = _use_home(monkeypatch, home)
    import_source(settings, Path(first_export), workspace_slug="fjordline")
    published = reconcile()
    assert published["status"] == "published"

    before = query_one(settings.canonical_path, CANONICAL_DIGEST_SQL)
    env = {"SLACKQUERY_HOME": str(home)}
    assert run_cli_until("import_before_commit", env, "import", second_export) == -signal.SIGKILL
    assert query_one(settings.canonical_path, CANONICAL_DIGEST_SQL) == before
    _assert_current_intact(settings, published["build_id"])

    import_source(settings, Path(second_export), workspace_slug="fjordline")
    assert run_cli_until("dbt_node_finished", env, "project") == -signal.SIGKILL
    _assert_current_intact(settings, published["build_id"])

    recovered = reconcile()
    assert recovered["status"] == "published"
    assert recovered["build_id"] != published["build_id"]

    # The same inputs, never interrupted: the reference needs the steps, not the flow run
    # around them (a Prefect run costs seconds more).
    clean = _use_home(monkeypatch, tmp_path / "uninterrupted")
    import_source(clean, Path(first_export), workspace_slug="fjordline")
    import_source(clean, Path(second_export), workspace_slug="fjordline")
    assert reconcile_plain()["status"] == "published"

    assert artifact_content(current_artifact(settings)) == artifact_content(current_artifact(clean))
