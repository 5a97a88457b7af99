"""The validation server forks one checkpoint run per request and outlives failed runs, and
takes a run in progress down with it when its builder goes away; the builder's side
restarts a dead server and quotes a crashed run's output."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from slackquery.artifacts import validate
from slackquery.errors import SlackqueryError
from slackquery.projection import PROJECT_DIR
from slackquery.settings import Settings


def start_server() -> subprocess.Popen[str]:
    """`python -m expectations.server` in a session of its own, as the builder starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "expectations.server"],
        cwd=PROJECT_DIR,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_each_request_gets_its_exit_code_and_its_own_output(tmp_path: Path) -> None:
    server = start_server()
    assert server.stdin is not None and server.stdout is not None

    def ask(name: str, argv: list[str]) -> tuple[int, str]:
        log = tmp_path / f"{name}.log"
        server.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())["exit"], log.read_text()

    result = str(tmp_path / "result.json")
    missing = tmp_path / "missing.duckdb"
    code, output = ask("missing", [str(missing), "--output", result])
    assert code == 2 and "missing.duckdb" in output and "Traceback" not in output
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    code, output = ask("crash", [str(empty), "--memory-limit", "nonsense", "--output", result])
    assert code == 1 and "Memory must have a number" in output and "Traceback" in output
    assert not (tmp_path / "result.json").exists()
    code, output = ask("bad-arguments", ["--no-such-option"])
    assert code == 2 and "usage: python -m expectations.checkpoint" in output
    code, output = ask("help", ["--help"])
    assert code == 0 and "--previous" in output and "Traceback" not in output
    server.stdin.close()
    assert server.wait(timeout=60) == 0
    assert server.stdout.read() == ""  # nothing but replies ever reached the protocol pipe


def test_a_run_in_progress_ends_when_its_builder_goes_away(tmp_path: Path) -> None:
    server = start_server()  # the run it forks shares its process group
    assert server.stdin is not None
    stalled = tmp_path / "log-nobody-reads"
    os.mkfifo(stalled)  # the forked run blocks opening its log until a reader comes
    try:
        server.stdin.write(json.dumps({"argv": ["--help"], "log": str(stalled)}) + "\n")
        server.stdin.flush()
        server.stdin.close()  # what the server sees when its builder is killed
        assert server.wait(timeout=60) == 0
        with pytest.raises(ProcessLookupError):
            os.killpg(server.pid, 0)  # the run is gone too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)


def test_a_run_that_could_not_run_is_one_line_and_a_dead_or_interrupted_server_is_replaced(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    # A crash (here: its result cannot be written) is quoted from the run's output.
    with pytest.raises(SlackqueryError, match=r"crashed \(exit 1\): .*No such file"):
        validate.run_checkpoint(settings, empty, tmp_path / "gone" / "result.json")
    missing = tmp_path / "missing.duckdb"
    crashed = r"could not run: cannot open artifact .*missing\.duckdb"
    with pytest.raises(SlackqueryError, match=crashed):
        validate.run_checkpoint(settings, missing, tmp_path / "result.json")
    server = validate._VALIDATOR._process
    assert server is not None
    server.kill()  # as if the server had died between two builds
    server.wait()
    with pytest.raises(SlackqueryError, match=crashed):
        validate.run_checkpoint(settings, missing, tmp_path / "result.json")
    second = validate._VALIDATOR._process
    assert second is not None and second is not server

    def interrupt(_point: str) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(validate, "crash_point", interrupt)  # Ctrl-C while it validates
        validate.run_checkpoint(settings, missing, tmp_path / "result.json")
    assert second.poll() is not None and validate._VALIDATOR._process is None
    with pytest.raises(SlackqueryError, match=crashed):
        validate.run_checkpoint(settings, missing, tmp_path / "result.json")
