"""`slackquery eval`: a missing query file is argparse's usage error; help keeps the
built-in grid's values whole."""

import pytest

from slackquery.cli import main
from slackquery.evaluation.grid import STANDARD_GRID
from tests.commands.usage import usage_error


@pytest.mark.parametrize("argv", [[], ["--json", "-"], ["--answers"]])
def test_without_a_query_file_is_a_usage_error(
    argv: list[str], home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage_error(["eval", *argv], capsys) == (
        "slackquery eval: error: the following arguments are required: QUERIES.yaml (or --compare)"
    )


def test_a_compare_side_to_run_without_a_query_file_is_a_usage_error(
    home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--compare", "lexical", "hybrid"])
    assert exited.value.code == 2
    assert "error: the following arguments are required: QUERIES.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("columns", ["80", "100"])
def test_help_never_splits_a_grid_value(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    lines = capsys.readouterr().out.splitlines()
    words = {word.rstrip(";") for line in lines for word in line.split()}
    for axis in STANDARD_GRID.split(";"):
        assert axis in words, f"{axis!r} is split across lines in `eval --help`"
