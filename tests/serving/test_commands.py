"""`slackquery search` prints readable results and the tool's JSON structure."""

import json
import stat
from pathlib import Path

import pytest

from serving.cursor import home_secret
from slackquery.cli import main
from slackquery.settings import Settings


def test_search_command_text_and_json(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "ERR-42", "--in", "#eng", "--mode", "lexical", "--limit", "3"]) == 0
    text = capsys.readouterr().out
    assert "#eng" in text and "https://acme.slack.com/archives/C1/" in text
    assert "**ERR**-**42**" in text  # the match is highlighted (piped: no escapes)
    assert "**eng**" not in text  # an operator's value is not a search term
    assert main(["search", "what is the password for the vault", "--mode", "lexical"]) == 0
    text = capsys.readouterr().out
    assert "**vault**" in text and "**the**" not in text  # stop words are not highlighted
    assert main(["search", "password", "--from", "@priya patel", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"results", "next_cursor", "route", "artifact_id"} <= set(payload)
    assert {hit["author_id"] for hit in payload["results"]} == {"U1"}


def test_search_command_shows_what_a_reply_answers(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "cleaned old docker images", "--mode", "lexical", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the reply, then the first message of its thread, then the reply's permalink
    assert "40% free now" in lines[2]
    assert lines[3] == "    in reply to Zoë Müller: The staging cluster is out of disk space again"
    # The query's terms in the thread's first message are highlighted: they count toward
    # the reply's lexical score.
    assert main(["search", "docker images on staging", "--mode", "lexical", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "40% free now" in lines[2]
    highlighted = "The **staging** cluster is out of disk space again"
    assert lines[3] == f"    in reply to Zoë Müller: {highlighted}"
    assert main(["search", "staging cluster out of disk", "--mode", "lexical", "--limit", "1"]) == 0
    assert "in reply to" not in capsys.readouterr().out  # a thread's first message


def test_search_command_user_error(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "deploy", "--in", "#engg"]) == 1
    assert "unknown channel" in capsys.readouterr().err


def test_search_command_cursor_works_in_the_next_command(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each command is a new engine: without SLACKQUERY_CURSOR_SECRET its key is the home's.
    assert main(["search", "password", "--limit", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["next_cursor"]
    assert (
        main(["search", "password", "--limit", "1", "--cursor", first["next_cursor"], "--json"])
        == 0
    )
    second = json.loads(capsys.readouterr().out)
    assert second["results"] and second["results"] != first["results"]
    key = published.home / "cursor.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_home_secret_is_made_once_and_only_in_an_existing_folder(tmp_path: Path) -> None:
    assert home_secret(tmp_path / "missing" / "cursor.key") is None
    secret = home_secret(tmp_path / "cursor.key")
    assert secret and home_secret(tmp_path / "cursor.key") == secret
    assert [path.name for path in tmp_path.iterdir()] == ["cursor.key"]


def test_scopes_command_lists_what_the_requester_may_search(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scopes"]) == 0
    text = capsys.readouterr().out
    assert "acme  #eng (public)" in text and "#secret-plans (private)" in text
    assert "beta  #eng (public)" in text
    assert text.splitlines()[-1].startswith("7 channel(s) in artifact ")  # DMs and group DM too
    assert main(["scopes", "--as", "U3", "--as-workspace", "acme", "--json"]) == 0
    seen = {scope["channel_id"] for scope in json.loads(capsys.readouterr().out)["scopes"]}
    assert seen == {"C1", "C2", "C3"}  # Chen is in no private channel, DM or group DM
    assert main(["scopes", "--channel", "#engg"]) == 1
    assert "close matches: eng" in capsys.readouterr().err
    assert main(["scopes", "--limit", "1"]) == 0
    assert "more exist" in capsys.readouterr().out
