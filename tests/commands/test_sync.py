"""`slackquery sync`'s arguments."""

import pytest

from slackquery.cli import main


def test_a_malformed_since_day_says_how_to_write_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["sync", "--since", "2024-13-01"])
    assert exited.value.code == 2
    assert "argument --since: '2024-13-01' is not a day; use YYYY-MM-DD" in capsys.readouterr().err
