"""The scope marts dbt projects beside the documents: workspaces, channels, users."""

import duckdb

from slackquery.settings import Settings
from tests.models.canonical_fixture import ROOT_TS, WORKSPACE
from tests.models.conftest import Projected


def _rows(settings: Settings, sql: str) -> list[tuple]:
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def _ts_us(ts: str) -> int:
    seconds, micros = ts.split(".")
    return int(seconds) * 1_000_000 + int(micros)


def test_workspaces_with_active_documents(projected: Projected) -> None:
    assert _rows(projected.settings, "select * from search_workspaces") == [
        (WORKSPACE, "acme", "Acme Corp", "https://acme.slack.com")
    ]


def test_channels_count_only_active_messages(projected: Projected) -> None:
    rows = _rows(
        projected.settings,
        "select channel_id, channel_name, conversation_type, count_messages, first_ts_us, "
        "last_ts_us from search_channels order by channel_id",
    )
    assert rows == [
        # Two of general's six content messages are tombstones (deleted, blank).
        (
            "C0GENERAL",
            "general",
            "public",
            4,
            _ts_us("1700000000.000100"),
            _ts_us("1700000006.000700"),
        ),
        # The deleted reply and the deleted root do not count; thread context never does.
        ("C0INCIDENT", "incidents", "public", 4, _ts_us(ROOT_TS), _ts_us("1700000360.000200")),
        (
            "C0MPIM",
            "mpdm-ann--bob--cy-1",
            "group_dm",
            1,
            _ts_us("1700000600.000100"),
            _ts_us("1700000600.000100"),
        ),
        ("D0ANNBOB", "bob", "dm", 1, _ts_us("1700000500.000100"), _ts_us("1700000500.000100")),
        (
            "G0SECRET",
            "secret-plans",
            "private",
            1,
            _ts_us("1700000400.000100"),
            _ts_us("1700000400.000100"),
        ),
    ]
    (total,) = _rows(
        projected.settings,
        "select count(*) from search_documents where is_active and document_kind = 'message'",
    )[0]
    assert sum(row[3] for row in rows) == total


def test_users_are_members_and_authors(projected: Projected) -> None:
    rows = _rows(
        projected.settings,
        "select user_key, user_name, is_bot, is_author, account_limit from search_users "
        "order by user_key",
    )
    # Cy's JSON says guest (`is_restricted`): serving shows Cy only Cy's conversations.
    assert rows == [
        (f"{WORKSPACE}:B0DEPLOY", "Deploy Bot", True, True, None),
        (f"{WORKSPACE}:U024BE7LH", "Annie", False, True, None),
        (f"{WORKSPACE}:U0BOB", "Bob Stone", False, True, None),
        (f"{WORKSPACE}:U0CY", "cy", False, True, "guest"),
        (f"{WORKSPACE}:U0ZOE", "Zoë", False, True, None),
    ]


def test_has_link_follows_the_lexical_text(projected: Projected) -> None:
    rows = _rows(
        projected.settings,
        "select document_id, has_link from search_documents where has_link order by 1",
    )
    assert rows == [
        (f"{WORKSPACE}:C0GENERAL:1700000001.000200", True),  # the CI run's URL
        (f"{WORKSPACE}:C0INCIDENT:1700000220.000300", True),  # the runbook link
        (f"thread:{WORKSPACE}:C0INCIDENT:{ROOT_TS}", True),  # ... inside its thread
    ]
