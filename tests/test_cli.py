"""The console command contract: help for every subcommand, one-line errors, --json."""

import argparse
import json
from pathlib import Path

import pytest

from slackquery.cli import COMMAND_MODULES, build_parser, main


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    assert len(subcommands) == len(COMMAND_MODULES)
    for name, subparser in subcommands.items():
        assert subparser.description, f"`slackquery {name}` has no description"
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
    assert "usage: slackquery" in capsys.readouterr().out


def test_every_action_and_argument_is_described() -> None:
    """Nested actions (`access grant|list|revoke`) and every argument say what they are."""
    parsers = [("slackquery", build_parser())]
    undescribed = []
    while parsers:
        name, parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child, subparser in action.choices.items():
                    if not subparser.description:
                        undescribed.append(f"{name} {child}")
                    parsers.append((f"{name} {child}", subparser))
            elif not action.help:
                undescribed.append(f"{name} {action.metavar or action.dest}")
    assert not undescribed, f"no description or help: {undescribed}"


def test_settings_json_lists_every_setting(
    settings: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["settings", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {row["env"] for row in rows}
    assert "SLACKQUERY_HOME" in names
    assert all(row["description"] for row in rows)


def test_settings_shows_derived_paths_resolved(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLACKQUERY_MODEL_CACHE_DIR")
    assert main(["settings", "--json"]) == 0
    values = {row["env"]: row["value"] for row in json.loads(capsys.readouterr().out)}
    assert values["SLACKQUERY_STATE_DB"] == str(home / "state.duckdb")
    assert values["SLACKQUERY_MODEL_CACHE_DIR"] == str(home / "cache" / "models")


def test_unknown_subcommand_exits_non_zero() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code != 0


def test_malformed_setting_is_one_line_naming_the_variable(
    home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACKQUERY_SERVE_PORT", "abc")
    monkeypatch.setenv("SLACKQUERY_SLACK_REQUESTS_PER_MINUTE", "fast")
    assert main(["settings"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert error.startswith("error: invalid setting: ")
    assert "SLACKQUERY_SERVE_PORT='abc': Input should be a valid integer" in error
    assert "SLACKQUERY_SLACK_REQUESTS_PER_MINUTE='fast': expected `tiers`" in error


def test_an_error_quoting_input_is_escaped_onto_one_line(
    home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "/no-such\x1b[31m\nexport\u202e"]) == 1
    error = capsys.readouterr().err
    assert error == "error: /no-such\\x1b[31m\\x0aexport\\u202e: no such file or folder\n"
