"""`slackquery embed-server`: where it cannot listen, and how it stops."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from slackquery.cli import main


def test_an_address_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It printed "serving … on" first, then uvicorn's lines, and exited with 3.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["embed-server", "--port", str(port)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_sigterm_ends_it_as_it_ends_any_command(tmp_path: Path) -> None:
    # It exited 0 on SIGINT and SIGTERM alike; a service manager read a stop as success.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(tmp_path)
    command = [sys.executable, "-m", "slackquery.cli", "embed-server", "--port", str(port)]
    server = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("serving ")
        # Stopped once it answers: a signal during uvicorn's start is another matter.
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        server.terminate()
        _, said = server.communicate(timeout=30)
    assert server.returncode == 128 + signal.SIGTERM
    assert said == "error: terminated\n"
