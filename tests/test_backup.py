"""`slackquery backup`: a consistent copy that is itself a home, taken or not at all."""

import errno
import json
import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from serving.cursor import home_secret
from slackquery import backup
from slackquery.access.grants import GrantStore, grants_path
from slackquery.artifacts import build, files
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.backup import back_up
from slackquery.canonical import importer
from slackquery.canonical.importer import import_source
from slackquery.canonical.store import writer_lock
from slackquery.cli import main
from slackquery.commands import CURSOR_KEY_NAME
from slackquery.commands.backup import LEFT_OUT_EXIT
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.artifacts.conftest import apply_env, copy_of_home, identity_for
from tests.artifacts.synthetic import synthesize_state
from tests.canonical.conftest import default_members, snapshot, write_export
from tests.crashing import held_open


@pytest.fixture(scope="module")
def source_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with a canonical store, a state database, a grant and a published artifact."""
    root = tmp_path_factory.mktemp("source")
    with pytest.MonkeyPatch.context() as monkeypatch:
        settings = apply_env(monkeypatch, root / "home")
        import_source(settings, write_export(root / "acme.zip", default_members()))
        synthesize_state(settings.state_path, identity_for(settings), messages=30)
        publish(settings, build_artifact(settings))
        GrantStore(grants_path(settings)).add(
            user_id="U01",
            workspace_id="T0TEST",
            label="alice",
            no_dms=False,
            expires=None,
            now=datetime(2026, 12, 7, tzinfo=UTC),
        )
        home_secret(settings.home / CURSOR_KEY_NAME)
    return settings.home


@pytest.fixture
def settings(source_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """This test's own copy of the source home."""
    return copy_of_home(source_home, tmp_path, monkeypatch)


def leftovers(folder: Path) -> list[str]:
    """What a backup may leave beside its copy: partial copies and their lock files."""
    return sorted(path.name for path in folder.iterdir() if path.suffix in (".tmp", ".lock"))


def test_a_backup_is_a_home_that_serves(settings: Settings, tmp_path: Path) -> None:
    destination = tmp_path / "backups" / "monday"

    record = back_up(settings, destination)

    copy = Settings(home=destination)
    for source, copied in (
        (settings.canonical_path, copy.canonical_path),
        (settings.state_path, copy.state_path),
    ):
        assert snapshot(copied) == snapshot(source)
    published = current_artifact(settings)
    assert published is not None and current_artifact(copy) == copy.artifact_path / published.name
    assert GrantStore(grants_path(copy)).grants() == GrantStore(grants_path(settings)).grants()
    assert home_secret(copy.home / CURSOR_KEY_NAME) == home_secret(settings.home / CURSOR_KEY_NAME)
    assert record["published_build"] in published.name
    assert json.loads((destination / "backup.json").read_text()) == record
    assert stat.S_IMODE(destination.stat().st_mode) == 0o700
    assert leftovers(destination.parent) == []


WRITERS = {
    "another import or sync": lambda settings: writer_lock(settings),
    # Reconcile leaves the state database closed between its steps: its own lock, not the
    # database's, keeps a backup from slipping in (and failing the run).
    "another reconcile": lambda settings: files.pipeline_lock(settings.home),
    "another artifact build or publish": lambda settings: files.artifact_lock(
        settings.artifact_path
    ),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_running_writer_makes_it_fail_at_once(
    settings: Settings, tmp_path: Path, writer: str
) -> None:
    with WRITERS[writer](settings), pytest.raises(SlackqueryError, match=writer):
        back_up(settings, tmp_path / "copy")

    assert leftovers(tmp_path) == [] and not (tmp_path / "copy").exists()


def test_a_backup_refused_by_a_running_command_names_it(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told = []

    def back_up_meanwhile(run: Any) -> Any:
        """`run`, which tries a backup at its first call."""
        calls = []

        def running(*args: Any, **kwargs: Any) -> Any:
            if not calls:
                with pytest.raises(SlackqueryError) as refused:
                    back_up(settings, tmp_path / "copy")
                told.append(str(refused.value).split(" (lock held")[0])
            calls.append(args)
            return run(*args, **kwargs)

        return running

    monkeypatch.setattr(
        importer,
        "_import_in_one_transaction",
        back_up_meanwhile(importer._import_in_one_transaction),
    )
    monkeypatch.setattr(build, "open_database", back_up_meanwhile(build.open_database))
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    build_artifact(settings)

    assert told == [
        f"an import (PID {os.getpid()}) is running",
        f"a build (PID {os.getpid()}) is running",
    ]


def test_writers_refused_during_a_backup_are_told_it_is_a_backup(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told = []
    copy_home = backup._copy_home

    def copying(*args: Any) -> dict[str, Any]:
        for writer in WRITERS.values():
            with pytest.raises(SlackqueryError) as refused, writer(settings):
                pass
            told.append(str(refused.value).split(" (lock held")[0])
        return copy_home(*args)

    monkeypatch.setattr(backup, "_copy_home", copying)
    back_up(settings, tmp_path / "copy")

    assert told == [f"a backup (PID {os.getpid()}) is running"] * len(WRITERS)
    # The next holder rewrites the name: one a killed backup left says nothing.
    with writer_lock(settings), pytest.raises(SlackqueryError) as refused, writer_lock(settings):
        pass
    assert str(refused.value).startswith("another import or sync is already running")


def test_a_database_another_process_writes_is_named(settings: Settings, tmp_path: Path) -> None:
    with held_open(settings.state_path), pytest.raises(SlackqueryError, match="state database"):
        back_up(settings, tmp_path / "copy")

    assert leftovers(tmp_path) == [] and not (tmp_path / "copy").exists()


def test_what_the_home_lost_is_named_not_passed_over(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "published artifact none (nothing was published)" and left out the state
    # database in silence.
    settings.state_path.unlink()
    published = current_artifact(settings)
    assert published is not None
    published.unlink()

    assert main(["backup", str(tmp_path / "copy"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)

    assert record["published_build"] is None and record["left_out"] == []
    assert record["missing_from_home"] == [
        f"the state database ({settings.state_path})",
        f"the published artifact {published.name} (`current.duckdb` points to it)",
    ]
    assert main(["backup", str(tmp_path / "again")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(", published artifact none")
    # It said `slackquery serve`, which has nothing to answer from in such a copy.
    assert lines[1] == (
        f"  use it: SLACKQUERY_HOME={tmp_path / 'again'} slackquery reconcile, then serve "
        "(or copy it back as the home)"
    )
    assert lines[2:] == [
        f"  not in the home, so not in the backup: {part}" for part in record["missing_from_home"]
    ]


def test_a_damaged_published_artifact_is_left_out_and_the_rest_kept(
    settings: Settings, tmp_path: Path
) -> None:
    # When something is going wrong is when a backup of the stores is needed most.
    published = current_artifact(settings)
    assert published is not None
    published.chmod(0o644)
    with published.open("r+b") as file:
        file.seek(published.stat().st_size // 2)
        file.write(b"damaged")

    record = back_up(settings, tmp_path / "copy")

    copy = Settings(home=tmp_path / "copy")
    assert record["published_build"] is None and current_artifact(copy) is None
    (left_out,) = record["left_out"]
    assert left_out.startswith("the published artifact, ") and "checksum mismatch" in left_out
    assert snapshot(copy.state_path) == snapshot(settings.state_path)
    assert not copy.artifact_path.exists() and leftovers(tmp_path) == []


def test_a_damaged_state_database_is_left_out_and_the_stores_kept(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A truncated state database failed the whole backup, the canonical store's too. Cut
    # after DuckDB's three 4 KiB headers: every block is gone, wherever DuckDB put them.
    with settings.state_path.open("r+b") as file:
        file.truncate(3 * 4096)

    assert main(["backup", str(tmp_path / "copy"), "--json"]) == LEFT_OUT_EXIT
    record = json.loads(capsys.readouterr().out)

    copy = Settings(home=tmp_path / "copy")
    assert snapshot(copy.canonical_path) == snapshot(settings.canonical_path)
    assert not copy.state_path.exists() and current_artifact(copy) is not None
    (left_out,) = record["left_out"]
    assert left_out.startswith("the state database, damaged (Could not read enough bytes")
    assert left_out.endswith(
        "; `slackquery reconcile` in the backup projects the canonical store again and "
        "embeds every message again"
    )
    assert main(["backup", str(tmp_path / "again")]) == LEFT_OUT_EXIT
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f", published artifact {record['published_build']}")
    assert lines[1] == f"  left out {left_out}"


def test_a_copy_that_fails_leaves_nothing(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*_args: object, **_options: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copytree", full_disk)
    with pytest.raises(OSError, match="No space left"):
        back_up(settings, tmp_path / "copy")

    assert leftovers(tmp_path) == [] and not (tmp_path / "copy").exists()


def test_the_next_backup_removes_a_killed_backups_copy_and_no_running_ones(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A backup killed outright (SIGKILL) left its partial copy there for good.
    killed, running = (tmp_path / f".nightly.{digit * 32}.tmp" for digit in "01")
    for folder in (killed, running):
        folder.mkdir()
        (folder / "canonical.duckdb").write_bytes(b"partial")
    (tmp_path / ".notes.tmp").mkdir()  # not a backup's
    with backup._locked(backup._lock_file(running)):  # its backup runs in another process
        assert main(["backup", str(tmp_path / "copy")]) == 0

    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  removed {killed.name}, the partial copy of a backup that was killed"
    )
    assert leftovers(tmp_path) == [
        backup._lock_file(running).name,
        running.name,
        ".notes.tmp",
    ]
    assert (running / "canonical.duckdb").read_bytes() == b"partial"


def test_a_file_in_the_way_of_its_folder_is_one_line(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "mount").write_text("not a folder")

    with pytest.raises(SlackqueryError, match=r"cannot make the folder .*mount: File exists"):
        back_up(settings, tmp_path / "mount" / "copy")


def test_an_existing_destination_or_an_empty_home_is_refused(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(SlackqueryError, match="taken exists; name a folder that does not"):
        back_up(settings, tmp_path / "taken")

    empty = Settings(home=tmp_path / "empty")
    with pytest.raises(SlackqueryError, match="nothing to back up"):
        back_up(empty, tmp_path / "copy")


def test_the_command_says_where_the_copy_is(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    destination = tmp_path / "copy"

    assert main(["backup", str(destination)]) == 0

    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith(f"backed up {settings.home.resolve()} to {destination}: ")
    assert second == (
        f"  use it: SLACKQUERY_HOME={destination} slackquery serve (or copy it back as the home)"
    )
