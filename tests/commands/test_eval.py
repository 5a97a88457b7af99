"""`slackquery eval`: a missing query file is argparse's usage error, a query file given
twice is refused; help keeps the built-in grid's values whole."""

from pathlib import Path

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


def test_a_query_file_given_twice_is_refused(
    tmp_path: Path, home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = tmp_path / "queries-dev.yaml"
    queries.write_text("queries: []\n", encoding="utf-8")
    copy = tmp_path / "copy" / "queries-dev.yaml"
    copy.parent.mkdir()
    copy.write_bytes(queries.read_bytes())
    for again in (queries, tmp_path / "copy" / ".." / "queries-dev.yaml", copy):
        assert main(["eval", str(queries), str(again)]) == 1
        assert capsys.readouterr().err == (
            f"error: {again}: the same queries as {queries}; as two sets every query would "
            "count twice, so give each query file once\n"
        )
