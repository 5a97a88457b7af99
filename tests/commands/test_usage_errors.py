"""Counts out of range are usage errors (`commands.whole_number`): the command's usage,
then the argument and why, exit 2, before any work starts."""

import pytest

from tests.commands.usage import usage_error


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["scopes", "--limit", "0"], "argument --limit: '0' is not a whole number from 1 to 500"),
        (["scopes", "--limit", "501"], "argument --limit: '501' is not a whole number from 1"),
        (["search", "x", "--limit", "0"], "argument --limit: '0' is not a whole number of at"),
        (["ask", "x?", "--max-evidence", "0"], "argument --max-evidence: '0' is not a whole"),
        (["sync", "--plan", "--messages", "-3"], "argument --messages: '-3' is not a whole"),
        (["sync", "--max-minutes", "0"], "argument --max-minutes: '0' is not a number above 0"),
        (["sync", "--max-minutes", "inf"], "argument --max-minutes: 'inf' is not a number above"),
        (["embed", "--max-items", "-5"], "argument --max-items: '-5' is not a whole number"),
        (["embed", "--max-items", "0"], "argument --max-items: '0' is not a whole number"),
        (["embed", "--dask-workers", "0"], "argument --dask-workers: '0' is not a whole"),
        (["embed-server", "--port", "0"], "argument --port: 0 is not a port: use 1-65535"),
        (["embed-server", "--max-batch", "-1"], "argument --max-batch: '-1' is not a whole"),
        (
            ["embed-server", "--max-body-bytes", "10"],
            "'10' is not a whole number of at least 1,024",
        ),
        (["bench", "--messages", "50"], "argument --messages: '50' is not a whole number from 100"),
        (["bench", "--queries", "0"], "argument --queries: '0' is not a whole number of at least"),
        (["bench", "--clients", "-1"], "argument --clients: '-1' is not a whole number of at"),
        (["bench", "--queries", "0", "--messages", "1000", "--clients", "0"], "--queries: '0'"),
        (["sample", "--messages", "50", "--out", "x.zip"], "--messages: '50' is not a whole"),
        (["sample", "--messages", "200", "--out", "x.zip", "--seed", "-1"], "--seed: '-1' is not"),
        (["sample", "--messages", "many", "--out", "x.zip"], "--messages: 'many' is not a whole"),
    ],
)
def test_a_count_out_of_range_is_a_usage_error(
    argv: list[str], problem: str, home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    error = usage_error(argv, capsys)
    assert error.startswith(f"slackquery {argv[0]}: error: ") and problem in error


@pytest.mark.parametrize("flag", ["--in", "--from", "--workspace"])
def test_an_empty_filter_is_a_usage_error_of_its_flag(
    flag: str, home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was exit 1 naming the MCP field: "channel_ids values must be non-empty".
    for command in (["search", "x"], ["ask", "x?"]):
        error = usage_error([*command, flag, " "], capsys)
        assert error.endswith(f"error: argument {flag}: must name one (it was empty)")


def test_a_count_in_range_is_taken_as_a_number() -> None:
    from slackquery.cli import build_parser

    args = build_parser("sync").parse_args(["sync", "--plan", "--messages", "0"])
    assert args.messages == 0
    args = build_parser("embed").parse_args(["embed", "--max-items", "5"])
    assert args.max_items == 5
