"""`slackquery artifacts`: its options are checked before the state is read."""

import pytest

from slackquery.cli import main


@pytest.mark.parametrize("limit", ["-1", "0", "many"])
def test_a_limit_below_one_is_a_usage_error(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["artifacts", "--limit", limit])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --limit: {limit!r} is not a whole number of at least 1" in error
