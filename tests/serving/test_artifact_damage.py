"""A published artifact damaged after its seal: every reader says so in one line instead of
a traceback, the operator's naming the file and how to move off it, a requester's neither."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from serving.artifact import MOVE_OFF_DAMAGED, LoadedArtifact
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.cli import main
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings, get_settings
from tests.artifacts.conftest import apply_env, copy_of_home, identity_for
from tests.artifacts.synthetic import synthesize_state

from .test_damage_while_served import DAMAGED, UNREADY_DAMAGED, zero_records
from .test_mcp import ROOT, call, http_server, run_client

MOVE_OFF = "roll back (`slackquery rollback <build id>`, see `slackquery artifacts`)"
# A word of every synthetic message's vocabulary (tests/artifacts/synthetic.py).
QUERY = "deploy"


@pytest.fixture(scope="module")
def sealed_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one synthetic artifact built and published, shared by this module."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        settings = apply_env(monkeypatch, tmp_path_factory.mktemp("damage") / "home")
        synthesize_state(settings.state_path, identity_for(settings), messages=60)
        publish(settings, build_artifact(settings))
        return settings.home


@pytest.fixture
def home(sealed_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings of a copy of `sealed_home`, which a test may damage."""
    return copy_of_home(sealed_home, tmp_path, monkeypatch)


def _garble(path: Path) -> None:
    """Overwrite every other 4 KiB block after DuckDB's three header blocks."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        for offset in range(3 * 4096, size, 2 * 4096):
            file.seek(offset)
            file.write(bytes(range(256)) * 16)


FILE_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbled": (_garble, "Corrupt database file: checksum mismatch in block at location"),
    "emptied": (lambda path: path.write_bytes(b""), "not a valid DuckDB database file"),
    "overwritten": (lambda path: path.write_text("x\n"), "not a valid DuckDB database file"),
    "cut short": (
        lambda path: path.write_bytes(path.read_bytes()[: 5 * 4096]),
        "Could not read enough bytes",
    ),
}


def _damage_file(settings: Settings, damage: str) -> Path:
    path = current_artifact(settings)
    assert path is not None
    path.chmod(0o644)
    FILE_DAMAGE[damage][0](path)
    return path


def _one_line_error(stderr: str, path: Path, reason: str) -> None:
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"error: published artifact {path.name} is damaged ({reason}"), stderr
    assert MOVE_OFF in stderr and str(path.parent) not in stderr, stderr


@pytest.mark.parametrize("damage", sorted(FILE_DAMAGE))
def test_a_damaged_published_file_is_one_line_for_every_command(
    home: Settings, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _damage_file(home, damage)
    reason = FILE_DAMAGE[damage][1]
    with pytest.raises(SlackqueryError, match=f"is damaged \\({reason}"):
        LoadedArtifact(path)
    for command in (
        ["search", QUERY, "--mode", "lexical"],
        ["scopes"],
        ["ask", f"what broke the {QUERY}?"],
        ["verify", f"The {QUERY} failed [1]."],
    ):
        assert main(command) == 1, command
        _one_line_error(capsys.readouterr().err, path, reason)


def test_a_damaged_published_file_is_not_ready_and_one_line_over_mcp(home: Settings) -> None:
    path = _damage_file(home, "garbled")
    with http_server(get_settings()) as url:
        unready = httpx.get(f"{url}/readyz")
        assert (unready.status_code, unready.json()) == (503, UNREADY_DAMAGED)

        async def body(client: object) -> str:
            return await call(client, "search_slack", query=QUERY, mode="lexical")

        error = run_client(url, body)
    assert error == f"ERROR: {DAMAGED}" and path.name not in error  # requesters get no names


def test_an_array_damaged_is_one_line_for_a_search_in_its_own_process(home: Settings) -> None:
    # A process of its own, as an operator runs it: its whole stderr is the one line.
    zero_records(home)
    searched = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", "search", QUERY, "--mode", "lexical"],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    path = current_artifact(home)
    assert searched.returncode == 1 and path is not None
    build_id = path.name.removeprefix("search-").removesuffix(".duckdb")
    _one_line_error(searched.stderr, path, f"build {build_id} is not sealed: checksum mismatch")
    assert "display.records.bytes.npy" in searched.stderr


def test_records_whose_lengths_read_as_nulls_are_damage_too(
    home: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0xff bytes read as length -1 (null) for every column: a record of nulls, not an error,
    # unless the lengths must add up to the record's bytes.
    zero_records(home, fill=0xFF)
    path = current_artifact(home)
    assert path is not None
    build_id = path.name.removeprefix("search-").removesuffix(".duckdb")
    assert main(["search", QUERY, "--mode", "lexical"]) == 1
    _one_line_error(
        capsys.readouterr().err, path, f"build {build_id} is not sealed: checksum mismatch"
    )


def test_a_published_file_gone_from_under_its_pointer_says_how_to_move_off(
    home: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    path = current_artifact(home)
    assert path is not None
    path.unlink()
    assert main(["search", QUERY, "--mode", "lexical"]) == 1
    assert (
        capsys.readouterr().err
        == f"error: published artifact {path} is missing; {MOVE_OFF_DAMAGED}\n"
    )
