"""`slackquery sample` wires the generator to the CLI contract (exit codes, --json)."""

import json
from pathlib import Path

import pytest

from slackquery.cli import main


def test_sample_command_reports_json(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "team.zip"
    assert main(["sample", "--messages", "300", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["messages"] == 300
    assert Path(summary["path"]) == out and out.is_file()
    assert Path(summary["queries_path"]) == tmp_path / "team.queries.yaml"


def test_sample_command_prints_a_text_summary(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sample", "--messages", "300", "--out", str(tmp_path / "t.zip")]) == 0
    text = capsys.readouterr().out
    assert "300 in" in text and "planted facts" in text


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--messages", "5", "--out", "t.zip"], "--messages: '5' is not a whole number from 100"),
        (["--messages", "200", "--out", "t.txt"], "--out: 't.txt' does not name a .zip file"),
        (["--messages", "200", "--out", "t.zip", "--seed", "-1"], "--seed: '-1' is not a whole"),
    ],
)
def test_sample_command_refuses_bad_arguments_as_usage_errors(
    tmp_path: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["sample", *argv])
    assert exited.value.code == 2
    usage, *_, error = capsys.readouterr().err.strip().splitlines()
    assert usage.startswith("usage: slackquery sample ")
    assert error.startswith("slackquery sample: error: argument ") and problem in error
    assert not list(tmp_path.iterdir())  # nothing written
