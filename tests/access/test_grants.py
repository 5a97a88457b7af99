"""Grant labels: short printable one-line names that can never pass for a grant id, and a
revoke that refuses a word naming more than one grant instead of picking one."""

import json
import re
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slackquery.access.grants import LABEL_MAX_CHARS, GrantStore, check_label
from slackquery.errors import SlackqueryError

NOW = datetime(2030, 6, 1, tzinfo=UTC)
PRIYA = {"user_id": "U0SQ00003", "workspace_id": "T0SAMPLE1", "no_dms": False, "expires": None}


@pytest.fixture
def store(tmp_path: Path) -> GrantStore:
    return GrantStore(tmp_path / "access" / "grants.json")


@pytest.mark.parametrize(
    "label",
    ["priya-laptop", "T0SAMPLE1:U0SQ00003", "Zoë's agent (CI) ✓", "g_team", "x" * LABEL_MAX_CHARS],
)
def test_a_short_printable_name_is_a_label(label: str) -> None:
    assert check_label(label) == label


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("", "--label is empty"),
        ("x" * 5000, "--label is 5,000 characters long; a label is at most 100"),
        ("\x1b[31mRED\x1b[0m", "has U+001B, which is not printable"),
        ("a\nb", "has U+000A, which is not printable"),
        ("a\tb", "has U+0009, which is not printable"),
        ("a\u202eb", "has U+202E, which is not printable"),  # right-to-left override
        ("a\u200bb", "has U+200B, which is not printable"),  # zero-width space
        ("a\u2028b", "has U+2028, which is not printable"),  # line separator
        ("a\x85b", "has U+0085, which is not printable"),  # C1 next line
        (" priya", "starts or ends with a space"),
        ("priya ", "starts or ends with a space"),
        ("-priya", "starts with '-'"),
        ("g_74a15a75cf95", "has the shape of a grant id"),
        ("G_74A15A75CF95", "has the shape of a grant id"),
        ("g_0", "has the shape of a grant id"),
    ],
)
def test_other_labels_are_refused_in_one_line(label: str, reason: str) -> None:
    with pytest.raises(SlackqueryError, match=re.escape(reason)) as refused:
        check_label(label)
    message = str(refused.value)
    assert message.isprintable() and len(message) < 200


def test_add_checks_the_label_and_writes_nothing(store: GrantStore) -> None:
    with pytest.raises(SlackqueryError, match="not printable"):
        store.add(label="a\nb", now=NOW, **PRIYA)
    with pytest.raises(SlackqueryError, match="shape of a grant id"):
        store.add(label="g_74a15a75cf95", now=NOW, **PRIYA)
    assert store.grants() == []


def test_a_label_cannot_take_another_grants_id(store: GrantStore) -> None:
    priya, _ = store.add(label="priya", now=NOW, **PRIYA)
    with pytest.raises(SlackqueryError, match="shape of a grant id"):
        store.add(label=priya.grant_id, now=NOW, **{**PRIYA, "user_id": "U0SQ00004"})
    assert [grant.label for grant in store.grants()] == ["priya"]


def legacy_file(store: GrantStore) -> tuple[str, str]:
    """A grants file written before labels were checked: jose's grant is labelled with
    priya's id. Returns (priya's id, jose's id)."""
    priya, _ = store.add(label="priya", now=NOW, **PRIYA)
    jose, _ = store.add(label="jose", now=NOW, **{**PRIYA, "user_id": "U0SQ00004"})
    rows = [asdict(priya), asdict(replace(jose, label=priya.grant_id))]
    store.path.write_text(json.dumps({"grants": rows}), encoding="utf-8")
    return priya.grant_id, jose.grant_id


def test_revoke_refuses_a_word_that_names_two_grants(store: GrantStore) -> None:
    priya_id, jose_id = legacy_file(store)
    with pytest.raises(SlackqueryError) as refused:
        store.revoke(priya_id, NOW)
    assert str(refused.value) == (
        f"'{priya_id}' names 2 grants (the id of {priya_id}, the label of {jose_id}); "
        "nothing was revoked: name one by its id alone with `access revoke --id GRANT_ID`"
    )
    assert all(grant.revoked_at is None for grant in store.grants())
    # Each can still be revoked, by its id alone.
    assert store.revoke(priya_id, NOW, by_id=True).grant_id == priya_id
    assert store.revoke(jose_id, NOW).grant_id == jose_id
    assert all(grant.revoked_at is not None for grant in store.grants())


def test_revoke_by_id_does_not_search_labels(store: GrantStore) -> None:
    store.add(label="priya", now=NOW, **PRIYA)
    with pytest.raises(SlackqueryError, match="no grant with id 'priya'"):
        store.revoke("priya", NOW, by_id=True)
    assert store.revoke("priya", NOW).label == "priya"


def test_a_new_id_never_equals_a_label_in_the_file(
    store: GrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    priya_id, _ = legacy_file(store)
    drawn = iter([priya_id.removeprefix("g_"), "0123456789ab"])
    monkeypatch.setattr("slackquery.access.grants.secrets.token_hex", lambda _: next(drawn))
    made, _ = store.add(label="ana", now=NOW, **{**PRIYA, "user_id": "U0SQ00005"})
    assert made.grant_id == "g_0123456789ab"
