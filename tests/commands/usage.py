"""What a command line refused as a usage error prints."""

import pytest

from slackquery.cli import main


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `slackquery ARGV`, check it exits 2 with the command's usage first, and return
    its last line, the error."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    usage, *_, error = capsys.readouterr().err.strip().splitlines()
    assert usage.startswith(f"usage: slackquery {argv[0]} ")
    return error
