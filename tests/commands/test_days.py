"""Commands that take a calendar day (`commands.iso_day`) say how to write a malformed one."""

import pytest

from slackquery.cli import main


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["sync", "--since", "2024-13-01"], "--since"),
        (["access", "grant", "--user", "U1", "--expires", "2024-13-01"], "--expires"),
        (["search", "foo", "--after", "2024-13-01"], "--after"),
        (["ask", "why?", "--before", "2024-13-01"], "--before"),
    ],
)
def test_a_malformed_day_says_how_to_write_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert f"argument {flag}: '2024-13-01' is not a day; use YYYY-MM-DD" in capsys.readouterr().err
