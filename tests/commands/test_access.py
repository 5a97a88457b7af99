"""`slackquery access`: labels are checked before anything is read, rows that quote a label
are one escaped line, and a revoke that could name two grants names none."""

import json
from dataclasses import asdict, replace
from datetime import UTC, datetime

import pytest

from slackquery.access.grants import GrantStore, grants_path
from slackquery.cli import main
from slackquery.settings import Settings

NOW = datetime(2030, 6, 1, tzinfo=UTC)
PRIYA = {"user_id": "U0SQ00003", "workspace_id": "T0SAMPLE1", "no_dms": False, "expires": None}


def failure(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `slackquery ARGV`, check it fails with exit 1 and one line, and return it."""
    capsys.readouterr()
    assert main(list(argv)) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize(
    ("label", "error"),
    [
        (
            "\x1b[31mRED\x1b[0m",
            "error: --label '\\x1b[31mRED\\x1b[0m' has U+001B, which is not printable; "
            "a label is one line of letters, digits, punctuation, symbols and spaces\n",
        ),
        (
            "a\nb",
            "error: --label 'a\\nb' has U+000A, which is not printable; "
            "a label is one line of letters, digits, punctuation, symbols and spaces\n",
        ),
        (
            "x" * 5000,
            "error: --label is 5,000 characters long; a label is at most 100 printable "
            "characters\n",
        ),
        (
            "g_74a15a75cf95",
            "error: --label 'g_74a15a75cf95' has the shape of a grant id (g_ and hex digits), "
            "so `access revoke` could not tell it from one; pick another --label\n",
        ),
        ("", "error: --label is empty; a label is 1 to 100 printable characters\n"),
    ],
    ids=["escape-sequence", "newline", "5000-characters", "grant-id", "empty"],
)
def test_grant_refuses_a_label_before_reading_the_artifact(
    settings: Settings, capsys: pytest.CaptureFixture[str], label: str, error: str
) -> None:
    # The home has no artifact: the label is refused before the user is looked up.
    assert failure(capsys, "access", "grant", "--user", "@priya", "--label", label) == error
    assert not grants_path(settings).exists()


def legacy_grants(settings: Settings) -> tuple[str, str]:
    """A grants file written before labels were checked: priya's grant has an ESC sequence
    and a newline in its label, jose's is labelled with priya's id. Returns their ids."""
    store = GrantStore(grants_path(settings))
    priya, _ = store.add(label="priya", now=NOW, **PRIYA)
    jose, _ = store.add(label="jose", now=NOW, **{**PRIYA, "user_id": "U0SQ00004"})
    rows = [
        asdict(replace(priya, label="\x1b[31mRED\x1b[0m\nfake row")),
        asdict(replace(jose, label=priya.grant_id)),
    ]
    store.path.write_text(json.dumps({"grants": rows}), encoding="utf-8")
    return priya.grant_id, jose.grant_id


def test_list_shows_each_grant_on_one_escaped_line(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    priya_id, jose_id = legacy_grants(settings)
    capsys.readouterr()
    assert main(["access", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{priya_id}  \\x1b[31mRED\\x1b[0m\\x0afake row  T0SAMPLE1:U0SQ00003  active",
        f"{jose_id}  {priya_id}  T0SAMPLE1:U0SQ00004  active",
    ]


def test_revoke_refuses_a_word_that_names_two_grants(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    priya_id, jose_id = legacy_grants(settings)
    assert failure(capsys, "access", "revoke", priya_id) == (
        f"error: '{priya_id}' names 2 grants (the id of {priya_id}, the label of {jose_id}); "
        "nothing was revoked: name one by its id alone with `access revoke --id GRANT_ID`\n"
    )
    store = GrantStore(grants_path(settings))
    assert all(grant.revoked_at is None for grant in store.grants())
    assert main(["access", "revoke", "--id", priya_id]) == 0
    assert capsys.readouterr().out == (f"revoked \\x1b[31mRED\\x1b[0m\\x0afake row ({priya_id})\n")
    assert main(["access", "revoke", jose_id]) == 0
    assert capsys.readouterr().out == f"revoked {priya_id} ({jose_id})\n"
    assert all(grant.revoked_at is not None for grant in store.grants())
