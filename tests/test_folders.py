"""The folders Slackquery creates are private; the ones it finds keep their modes."""

import stat
from pathlib import Path

import pytest

from slackquery.folders import make_folder


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_every_folder_it_creates_is_private(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "home" / "artifacts" / "tmp")

    assert folder.is_dir()
    assert [mode(path) for path in (folder, folder.parent, folder.parent.parent)] == [0o700] * 3


@pytest.mark.usefixtures("open_umask")
def test_a_folder_that_exists_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)

    make_folder(shared / "artifacts")
    make_folder(shared)

    assert (mode(shared), mode(shared / "artifacts")) == (0o750, 0o700)


def test_a_file_in_the_way_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("not a folder")

    with pytest.raises(FileExistsError):
        make_folder(tmp_path / "home")
