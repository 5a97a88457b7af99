"""A published artifact damaged after its seal never blocks building and publishing the
sound build that replaces it, and validation that cannot run says why in one line."""

import shutil
from pathlib import Path

import pytest

from slackquery.artifacts import files, validate
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.artifacts.conftest import identity_for
from tests.artifacts.synthetic import synthesize_state

DAMAGED_PREVIOUS = (
    "the previously published artifact {name} cannot be read (Corrupt database file: "
    "checksum mismatch in block at location "
)


def _garble(path: Path) -> None:
    """Overwrite every 4 KiB block after DuckDB's three header blocks."""
    path.chmod(0o644)
    with path.open("r+b") as file:
        for offset in range(3 * 4096, path.stat().st_size, 4096):
            file.seek(offset)
            file.write(bytes(range(256)) * 16)


def _warnings(settings: Settings, build_id: str) -> list[str]:
    return files.read_json(files.validation_file(settings.artifact_path, build_id))["warnings"]


def test_a_damaged_current_artifact_gives_way_to_a_sound_build(state_settings: Settings) -> None:
    settings = state_settings
    old = build_artifact(settings)
    publish(settings, old)
    synthesize_state(settings.state_path, identity_for(settings), messages=70, seed=1)
    built_before = build_artifact(settings)  # validated against the sound `old`
    old_path = files.artifact_file(settings.artifact_path, old)
    _garble(old_path)
    expected = DAMAGED_PREVIOUS.format(name=old_path.name)

    # A build validated while `old` was damaged: the drift check had nothing to compare with.
    synthesize_state(settings.state_path, identity_for(settings), messages=80, seed=2)
    built_after = build_artifact(settings)
    (warning,) = _warnings(settings, built_after)
    assert warning.startswith(expected), warning

    # Publishing a build validated before the damage runs the checkpoint again (the drift
    # setting changed), which compares with the damaged `old` and passes with the warning.
    looser = settings.model_copy(update={"max_count_drift": 0.6})
    outcome = publish(looser, built_before)
    assert outcome["validation"] == {"success": True, "reused": False}
    assert current_artifact(settings) == files.artifact_file(settings.artifact_path, built_before)
    (warning,) = _warnings(settings, built_before)
    assert warning.startswith(expected), warning
    assert outcome["previous"] == old_path.name


def test_a_candidate_that_does_not_open_fails_validation_in_one_line(
    state_settings: Settings, tmp_path: Path
) -> None:
    settings = state_settings
    build_id = build_artifact(settings)
    candidate = settings.artifact_path / f"search-{build_id}.copy.duckdb"
    shutil.copy(files.artifact_file(settings.artifact_path, build_id), candidate)
    _garble(candidate)
    with pytest.raises(SlackqueryError) as raised:
        validate.run_checkpoint(settings, candidate, tmp_path / "result.json")
    message = str(raised.value)
    assert message.startswith(
        f"validation of {candidate.name} could not run: cannot open artifact {candidate}: "
        "Corrupt database file: computed checksum"
    ), message
    assert "Traceback" not in message and " | " not in message and "\n" not in message
