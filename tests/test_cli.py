"""The console command contract: help for every subcommand, one-line errors, --json."""

import argparse
import errno
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from slackquery import cli
from slackquery.cli import COMMAND_MODULES, build_parser, main
from slackquery.commands import emit, show_settings, shows_progress
from slackquery.escaping import emphasis
from slackquery.settings import Settings


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


def test_an_empty_variable_is_an_unset_one(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty SLACKQUERY_CURSOR_SECRET signed each process's cursors with a random key
    # (the next command refused every printed `--cursor`); an empty path meant `.`.
    monkeypatch.setenv("SLACKQUERY_CURSOR_SECRET", "")
    monkeypatch.setenv("SLACKQUERY_STATE_DB", "")
    settings = Settings()
    assert settings.cursor_secret is None and settings.state_path == home / "state.duckdb"


def test_unknown_subcommand_exits_non_zero() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code != 0


def test_an_unknown_option_of_a_command_shows_that_commands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # argparse reported it under the top-level usage, which lists no option of the command.
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "--mdoe", "lexical", "deploy"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("usage: slackquery search [-h] [--mode {hybrid,lexical,semantic}]")
    assert error.endswith("slackquery search: error: unrecognized arguments: --mdoe\n")


def test_an_unknown_option_before_the_command_shows_the_top_level_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # It was reported under search's usage, as if search had been given it.
    with pytest.raises(SystemExit) as exit_info:
        main(["--mdoe", "search", "deploy"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("usage: slackquery [-h] [--version] COMMAND ...")
    assert error.endswith("slackquery: error: unrecognized arguments: --mdoe\n")
    with pytest.raises(SystemExit) as exit_info:  # argparse's own prefixes still work
        main(["--vers"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("slackquery ")


def test_ctrl_c_while_the_command_loads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Importing a command's modules takes a second or more; Ctrl-C then was a traceback.
    def interrupted(command: str | None) -> argparse.ArgumentParser:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["search", "deploy"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"


def test_a_removed_current_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `project` there ended in dbt's traceback, then a second one from its telemetry.
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["settings"]) == 1
    assert capsys.readouterr().err == (
        "error: the current folder was removed; change to one that exists\n"
    )


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


@pytest.mark.parametrize("command", [["publish", "latest"], ["access", "list"], ["search", "x"]])
def test_a_home_that_is_a_file_is_one_line(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # publish and access gave NotADirectoryError tracebacks; search said to build first.
    home = tmp_path / "home"
    home.write_text("x\n")
    monkeypatch.setenv("SLACKQUERY_HOME", str(home))
    assert main(command) == 1
    error = capsys.readouterr().err
    assert error == (
        f"error: invalid setting: SLACKQUERY_HOME={str(home)!r}: expected a folder, not a file\n"
    )


def test_an_error_quoting_input_is_escaped_onto_one_line(
    home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "/no-such\x1b[31m\nexport\u202e"]) == 1
    error = capsys.readouterr().err
    assert error == "error: /no-such\\x1b[31m\\x0aexport\\u202e: no such file or folder\n"


def test_under_json_an_error_is_also_a_document_on_stdout(
    home: object, capsys: pytest.CaptureFixture[str]
) -> None:
    # A script reading `--json` output got nothing on stdout to parse when a command failed.
    assert main(["import", "/no-such\x1b[31m\nexport", "--json"]) == 1
    said = capsys.readouterr()
    assert said.err == "error: /no-such\\x1b[31m\\x0aexport: no such file or folder\n"
    assert json.loads(said.out) == {
        "error": "/no-such\x1b[31m\nexport: no such file or folder",
        "exit_status": 1,
    }
    assert "\x1b" not in said.out  # escaped in the document, as every `--json` value is


@pytest.mark.parametrize(
    ("words", "document"),
    [
        (["search", "--json", "--limit", "abc", "x"], "argument --limit: 'abc' is not a whole"),
        (["search", "x", "--json", "--in"], "argument --in: expected one argument"),
        (["serch", "--json"], "argument COMMAND: invalid choice: 'serch'"),
        (["access", "list", "--json", "--bogus"], "unrecognized arguments: --bogus"),
        (["search", "--limit", "abc", "x"], None),  # no --json
        (["search", "--limit", "abc", "x", "--", "--json"], None),  # a word of the query
        (["eval", "--json"], None),  # eval's --json names the file to write
    ],
)
def test_under_json_a_usage_error_is_also_a_document_on_stdout(
    capsys: pytest.CaptureFixture[str], words: list[str], document: str | None
) -> None:
    # A script reading `--json` output got nothing on stdout for a mistaken argument.
    with pytest.raises(SystemExit) as exit_info:
        main(words)
    assert exit_info.value.code == 2
    said = capsys.readouterr()
    assert "usage: slackquery" in said.err  # argparse's own text stays on stderr
    if document is None:
        assert said.out == ""
    else:
        assert json.loads(said.out)["error"].startswith(document)
        assert json.loads(said.out)["exit_status"] == 2


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SLACKQUERY_SLACK_API_URL", "http://[::1"),
        ("SLACKQUERY_SLACK_API_URL", "not a url"),
        ("SLACKQUERY_SLACK_API_URL", "ftp://files.example.com/api"),
        ("SLACKQUERY_EMBEDDING_URL", "http://127.0.0.1:99999"),
        ("SLACKQUERY_IMPORT_MEMORY_LIMIT", "lots"),
        ("SLACKQUERY_IMPORT_MEMORY_LIMIT", "80%"),
        ("SLACKQUERY_ARTIFACT_BUILD_MEMORY_LIMIT", "0GB"),
        ("SLACKQUERY_MAX_MESSAGE_BYTES", "0"),
        ("SLACKQUERY_MAX_MESSAGE_BYTES", "-1"),
        ("SLACKQUERY_SERVE_PORT", "70000"),
    ],
)
def test_a_setting_no_command_could_use_is_refused_by_name(
    home: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["settings"]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: invalid setting: {variable}={value!r}: ")
    assert error.count("\n") == 1


def test_memory_sizes_duckdb_parses_and_http_urls_are_accepted() -> None:
    for size in ("1536MB", "4GB", "512MiB", " 1.5 gb ", "2G"):
        assert Settings(import_memory_limit=size).import_memory_limit == size.strip()
    for url in ("https://slack.com/api", "http://127.0.0.1:8080/api/", "http://[::1]:11435"):
        assert Settings(slack_api_url=url, embedding_url=url).slack_api_url == url


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/vectors.npy"),
            "no space left on device writing /data/vectors.npy",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
        (PermissionError(errno.EACCES, "Permission denied", "/data"), "permission denied: /data"),
        (OSError(errno.ENAMETOOLONG, "File name too long", "/b/cc"), "file name too long: /b/cc"),
        (
            duckdb.IOException(
                'IO Error: Cannot open file "/h/artifacts/search-1.duckdb.tmp": Operation not '
                "permitted"
            ),
            "operation not permitted: /h/artifacts/search-1.duckdb.tmp",
        ),
        (
            duckdb.TransactionException(
                'TransactionContext Error: Failed to commit: Could not write file "/data/a '
                'b.wal": No space left on device'
            ),
            "no space left on device writing /data/a b.wal",
        ),
        (
            duckdb.IOException('IO Error: Could not read from file "/data/x":\nInput/output error'),
            'IO Error: Could not read from file "/data/x": Input/output error',
        ),
    ],
)
def test_a_storage_failure_is_one_line_and_exit_1(
    home: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    line: str,
) -> None:
    def fail(args: argparse.Namespace, settings: Settings) -> int:
        raise error

    monkeypatch.setattr(show_settings, "run", fail)
    assert main(["settings"]) == 1
    assert capsys.readouterr().err == f"error: {line}\n"


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/x"),
        duckdb.CatalogException("Catalog Error: Table with name x does not exist!"),
        duckdb.IOException('IO Error: No files found that match the pattern "/data/*.csv"'),
        ValueError("a bug"),
    ],
)
def test_any_other_error_keeps_its_traceback(
    home: object, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def fail(args: argparse.Namespace, settings: Settings) -> int:
        raise error

    monkeypatch.setattr(show_settings, "run", fail)
    with pytest.raises(type(error)):
        main(["settings"])


def test_sigterm_stops_a_command_as_ctrl_c_does(
    home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A service manager's stop ended the process where it stood: a build left no record
    # of why, and its candidate behind.
    cleaned = []

    def stopped(args: argparse.Namespace, settings: Settings) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # handled before the next statement
            return 0
        except KeyboardInterrupt as error:
            cleaned.append(type(error).__name__)
            raise

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(show_settings, "run", stopped)
    assert main(["settings"]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "error: terminated\n"
    assert cleaned == ["Terminated"] and signal.getsignal(signal.SIGTERM) == before
    # The kernel ends the process if the clean-up has not ended it STOP_GRACE_S after.
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert 0 < signal.alarm(0) <= cli.STOP_GRACE_S


STUCK_AFTER_A_STOP = """
import signal, threading
from slackquery import cli
cli.STOP_GRACE_S = 1
signal.signal(signal.SIGTERM, cli._terminate)
try:
    signal.raise_signal(signal.SIGTERM)
except cli.Terminated:
    threading.Event().wait()  # a clean-up that never ends, as DuckDB's can
"""


def test_a_command_stuck_after_a_stop_is_ended_by_the_kernel() -> None:
    # DuckDB spun for good now and then after a query a signal ended: the process held
    # the pipeline lock, and every scheduled reconcile after it skipped its run.
    ended = subprocess.run([sys.executable, "-c", STUCK_AFTER_A_STOP], timeout=60)
    assert ended.returncode == -signal.SIGALRM


def test_the_console_command_starts_without_duckdb() -> None:
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, slackquery.cli; print('duckdb' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout == "False\n"


def test_json_output_escapes_terminal_controls_and_stays_the_same_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    value = {"author": "Zoë", "text": "a\x9b31mred\u202eevil\u2028\x7f\nline", "n": 1}
    emit(argparse.Namespace(json=True), value, "unused")
    out = capsys.readouterr().out
    assert json.loads(out) == value
    assert "Zoë" in out and "\\u009b" in out and "\\u202e" in out
    assert not any(char in out for char in "\x9b\u202e\u2028\x7f")


def test_commands_send_prefect_no_usage_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prefect's import, in a terminal, wrote a device id and sent a first-use event; Prefect
    # (and dbt, a child process) read DO_NOT_TRACK from the environment.
    monkeypatch.setenv("DO_NOT_TRACK", "")
    assert main(["settings", "--json"]) == 0
    assert os.environ["DO_NOT_TRACK"] == "1"
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # an operator's own choice stands
    assert main(["settings", "--json"]) == 0
    assert os.environ["DO_NOT_TRACK"] == "0"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("variables", "terminal", "bold"),
    [
        ({}, True, True),
        ({"NO_COLOR": "1"}, True, False),
        ({"TERM": "dumb"}, True, False),
        ({}, False, False),
    ],
)
def test_bold_and_bars_only_where_the_terminal_takes_them(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], terminal: bool, bold: bool
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdout", _Terminal() if terminal else io.StringIO())
    monkeypatch.setattr(sys, "stderr", _Terminal() if terminal else io.StringIO())
    assert emphasis() == (("\033[1m", "\033[0m") if bold else ("**", "**"))
    for json_flag in (False, True):
        args = argparse.Namespace(json=json_flag)
        assert shows_progress(args) == (terminal and not json_flag)
