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


def test_sample_command_rejects_too_few_messages(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sample", "--messages", "5", "--out", str(tmp_path / "t.zip")]) == 1
    assert capsys.readouterr().err.startswith("error: --messages must be")
