"""`slackquery sync`'s arguments and Slack settings: refused before any request is made."""

from pathlib import Path

import pytest

from slackquery.cli import build_parser, main
from tests.commands.usage import usage_error


@pytest.mark.parametrize("types", ["public,bogus", "", " , "])
def test_an_unknown_conversation_type_is_a_usage_error(
    types: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--types public,bogus` exited 1 with no usage.
    error = usage_error(["sync", "--types", types], capsys)
    assert error.startswith(f"slackquery sync: error: argument --types: {types!r}: expected")
    assert "public, private, mpim, im" in error


def test_types_are_read_as_a_tuple() -> None:
    parser = build_parser("sync")
    assert parser.parse_args(["sync", "--types", " im, mpim "]).types == ("im", "mpim")
    assert parser.parse_args(["sync"]).types == ("public", "private", "mpim", "im")


@pytest.mark.parametrize(
    "token", ["xoxb-1234-abcd\n", " xoxb-1234-abcd", "xoxb-1234 abcd", "xoxb-1234-äbcd"]
)
def test_a_token_no_slack_token_looks_like_is_one_line_that_never_shows_it(
    token: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trailing newline was retried for 1.5 minutes as a transport error; non-ASCII was a
    # UnicodeEncodeError traceback.
    monkeypatch.setenv("SLACKQUERY_SLACK_TOKEN", token)
    assert main(["sync"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: invalid setting: SLACKQUERY_SLACK_TOKEN ")
    assert err.count("\n") == 1 and "1234" not in err


@pytest.mark.parametrize("rate", ["inf", "-inf", "nan", "1e-9", "0.09", "-1", "fast"])
def test_a_pace_outside_its_bounds_is_one_line(
    rate: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `inf` and `1e-9` were OverflowError tracebacks, in the pacing and in time.sleep.
    monkeypatch.setenv("SLACKQUERY_SLACK_REQUESTS_PER_MINUTE", rate)
    assert main(["sync"]) == 1
    assert capsys.readouterr().err == (
        f"error: invalid setting: SLACKQUERY_SLACK_REQUESTS_PER_MINUTE={rate!r}: expected "
        "`tiers`, `non-marketplace`, 0 (unpaced) or a number of requests/min from 0.1\n"
    )


@pytest.mark.parametrize("rate", ["0", "0.1", "1e6", "tiers", "non-marketplace"])
def test_a_pace_within_its_bounds_is_taken(
    rate: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACKQUERY_SLACK_REQUESTS_PER_MINUTE", rate)
    monkeypatch.delenv("SLACKQUERY_SLACK_TOKEN", raising=False)
    assert main(["sync"]) == 1
    assert "set SLACKQUERY_SLACK_TOKEN" in capsys.readouterr().err  # past the settings
