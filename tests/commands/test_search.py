"""`slackquery search` and `ask`: their options are checked before the archive is read."""

import pytest

from slackquery.cli import build_parser, main
from slackquery.commands import exclusions_apart, with_exclusions
from slackquery.commands.search import conversation_label
from tests.commands.usage import usage_error


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["search", "x", "--limit", "51"], "--limit"),
        (["ask", "x?", "--max-evidence", "51"], "--max-evidence"),
    ],
)
def test_a_count_over_the_max_results_setting_is_a_usage_error(
    argv: list[str], option: str, home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage_error(argv, capsys) == (
        f"slackquery {argv[0]}: error: argument {option}: '51' is not a whole number from 1 "
        "to 50 (SLACKQUERY_SEARCH_MAX_RESULTS)"
    )


def test_the_max_follows_the_setting(
    home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACKQUERY_SEARCH_MAX_RESULTS", "60")
    assert main(["search", "x", "--limit", "51"]) == 1  # past the check: nothing is published
    assert "no published search artifact" in capsys.readouterr().err


def test_the_max_results_setting_fits_the_defaults(
    home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A lower one refused every plain `search` (its default --limit 10) and `ask` (12).
    monkeypatch.setenv("SLACKQUERY_SEARCH_MAX_RESULTS", "11")
    assert main(["search", "x"]) == 1
    error = capsys.readouterr().err
    assert "SLACKQUERY_SEARCH_MAX_RESULTS" in error and "greater than or equal to 12" in error


@pytest.mark.parametrize("command", [["search", "x"], ["ask", "x?"]])
def test_the_limit_help_names_the_setting(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command[0], "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "at most SLACKQUERY_SEARCH_MAX_RESULTS, default 50" in help_text
    assert "at most 50)" not in help_text and "(1-50," not in help_text


@pytest.mark.parametrize("day", ["today", "Yesterday", "2024-02-29"])
def test_a_day_flag_takes_a_day_or_today_or_yesterday(day: str) -> None:
    from slackquery.cli import build_parser

    args = build_parser("search").parse_args(["search", "x", "--after", day, "--before", day])
    assert args.after == args.before == day.lower()


@pytest.mark.parametrize(("command", "field"), [("search", "query"), ("ask", "question")])
def test_unquoted_words_are_one_text(command: str, field: str) -> None:
    # A shell splits an unquoted question into words; argparse refused every one after the
    # first as an unrecognized argument.
    args = build_parser(command).parse_args([command, "why", "was", "the", "api", "down?"])
    assert getattr(args, field) == "why was the api down?"


@pytest.mark.parametrize(
    ("name", "kind", "label"),
    [
        ("eng", "public", "#eng"),
        ("plans", "private", "#plans"),
        ("jose, zoe", "dm", "jose, zoe (dm)"),  # was "#jose, zoe", as if a channel
        ("jose, priya, zoe", "group_dm", "jose, priya, zoe (group_dm)"),
        (None, "dm", "D0SQDM001 (dm)"),
    ],
)
def test_a_conversation_is_labelled_by_its_kind(name: str | None, kind: str, label: str) -> None:
    assert conversation_label(name, kind, "D0SQDM001") == label


@pytest.mark.parametrize(
    ("argv", "kept", "taken"),
    [
        (
            ["search", "deploy", "-rollback", "--limit", "3"],
            ["search", "deploy", "--limit", "3"],
            ["-rollback"],
        ),
        (
            ["ask", "who", "-hotfix", '-"orders db"', "?"],
            ["ask", "who", "?"],
            ["-hotfix", '-"orders db"'],
        ),
        (["search", "-h"], ["search", "-h"], []),  # help stays help
        # An option's value, joined to its option: argparse read `--in -x` as two options.
        (["search", "x", "--in", "-x"], ["search", "x", "--in=-x"], []),
        (["search", "--in", "--json", "x"], ["search", "--in", "--json", "x"], []),
        (["search", "x", "--in", "-h"], ["search", "x", "--in", "-h"], []),
        (["search", "x", "-5"], ["search", "x", "-5"], []),  # a number is no exclusion
        (["scopes", "-x"], ["scopes", "-x"], []),  # no text argument to hold it
        (["search", "x", "--", "-y", "-z"], ["search", "x", "--", "-y", "-z"], []),
        # Exclusions alone: the first stands for the query, as `--` makes it one.
        (["search", "-a", "--limit", "2", "-b"], ["search", "--limit", "2", "--", "-a"], ["-b"]),
        (["search", "search", "-a"], ["search", "search"], ["-a"]),
        (["search", "x", '-"unclosed', "-_y"], ["search", "x"], ['-"unclosed', "-_y"]),
        (["search", "x", "-.5"], ["search", "x", "-.5"], []),
    ],
)
def test_unquoted_exclusions_stay_in_the_query(
    argv: list[str], kept: list[str], taken: list[str]
) -> None:
    # Slack's `-word` typed as it is: argparse refused it as an unknown option.
    parser = build_parser(argv[0])
    assert exclusions_apart(parser, argv[0], argv) == (kept, taken)


def test_an_option_value_that_starts_with_a_dash_is_that_option_s_value() -> None:
    parser = build_parser("search")
    kept, _ = exclusions_apart(parser, "search", ["search", "x", "--in", "-x", "--from", "-y"])
    args = parser.parse_args(kept)
    assert (args.query, args.channels, args.authors) == ("x", ["-x"], ["-y"])


@pytest.mark.parametrize(
    ("argv", "query"),
    [
        (["search", "deploy", "-rollback", "--limit", "3"], "deploy -rollback"),
        (["search", "-a", "--limit", "2", "-b"], "-a -b"),
    ],
)
def test_the_exclusions_end_the_query_they_were_taken_from(argv: list[str], query: str) -> None:
    parser = build_parser("search")
    kept, taken = exclusions_apart(parser, "search", argv)
    args = parser.parse_args(kept)
    with_exclusions(args, taken)
    assert (args.query, args.limit) == (query, int(argv[argv.index("--limit") + 1]))
