"""Commands that write the state database or the artifacts hold the pipeline lock, and the
readers of the state database stay out while anyone holds it."""

import os
from datetime import UTC, datetime, timedelta

import pytest

from slackquery.artifacts import files
from slackquery.cli import main
from slackquery.commands import build as build_command
from slackquery.embedding.run_progress import RunProgress
from slackquery.settings import Settings

T0 = datetime(2026, 12, 7, 12, tzinfo=UTC)
WRITERS = (
    ["project"],
    ["embed"],
    ["build"],
    ["publish", "latest"],
    ["rollback", "20261207T120000Z-00000000-00000000"],
)


def test_writers_and_readers_meet_a_running_reconcile_at_once_and_name_it(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # A publish waiting on the state database held the artifact lock when the reconcile
    # came to build, which failed it; a reader between two of its steps could fail the next.
    reconcile = files.holder_name("a reconcile")
    lock = settings.home / files.RECONCILE_LOCK_NAME
    with files.pipeline_lock(settings.home, reconcile):
        for command in WRITERS:
            assert main(command) == 1, command
            assert (
                capsys.readouterr().err == f"error: {reconcile} is running (lock held on {lock})\n"
            )
        assert main(["artifacts"]) == 1
        assert capsys.readouterr().err == (
            f"error: {reconcile} holds the state database: the build history once it is done\n"
        )
        assert main(["embedding-status"]) == 1
        assert "the report once it is done" in capsys.readouterr().err
        # In its embed step, the progress its embed run writes beside the state database.
        progress = RunProgress(settings.state_path, "g1", T0)
        progress.update(T0 + timedelta(seconds=4), claimable=20, claimed=8, succeeded=8, failed=0)
        assert main(["embedding-status"]) == 0
        assert "8 of 20 items done" in capsys.readouterr().out
    assert files.pipeline_holder(settings.home) is None


def test_a_writer_holds_the_lock_while_it_runs_and_a_reconcile_is_told_its_name(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []

    def build(args: object, settings: Settings) -> int:
        seen.append(files.pipeline_holder(settings.home))
        return 0

    monkeypatch.setattr(build_command, "run", build)
    assert main(["build"]) == 0
    assert seen == [f"a build (PID {os.getpid()})"]
    assert files.pipeline_holder(settings.home) is None
