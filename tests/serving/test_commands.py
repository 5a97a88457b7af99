"""`slackquery search` prints readable results and the tool's JSON structure."""

import json

import pytest

from slackquery.cli import main
from slackquery.settings import Settings


def test_search_command_text_and_json(
    published: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "ERR-42", "--in", "#eng", "--mode", "lexical", "--limit", "3"]) == 0
    text = capsys.readouterr().out
    assert "#eng" in text and "https://acme.slack.com/archives/C1/" in text
    assert "**ERR**-**42**" in text  # the match is highlighted (piped: no escapes)
    assert main(["search", "password", "--from", "@priya patel", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"results", "next_cursor", "route", "artifact_id"} <= set(payload)
    assert {hit["author_id"] for hit in payload["results"]} == {"U1"}


def test_search_command_user_error(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "deploy", "--in", "#engg"]) == 1
    assert "unknown channel" in capsys.readouterr().err
