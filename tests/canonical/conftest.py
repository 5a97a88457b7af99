"""A tiny generated Slack export (written per test as a ZIP or folder) and store helpers."""

import json
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from slackquery.canonical import importer

TEAM = "T0TEST"
USERS = [
    {
        "id": "U01",
        "team_id": TEAM,
        "name": "alice",
        "real_name": "Alice Adams",
        "tz": "Europe/Paris",
        "is_admin": True,
        "profile": {
            "display_name": "ali",
            "real_name": "Alice Adams",
            "title": "Eng",
            "team": TEAM,
        },
    },
    {
        "id": "U02",
        "team_id": TEAM,
        "name": "bob",
        "real_name": "Bob Brown",
        "profile": {"display_name": "", "real_name": "Bob Brown", "team": TEAM},
    },
    {
        "id": "U03",
        "team_id": TEAM,
        "name": "chloé",
        "deleted": True,
        "profile": {"display_name": "Chloé", "team": TEAM},
    },
    {"id": "U0BOT", "team_id": TEAM, "name": "deploybot", "is_bot": True, "profile": {}},
]
CHANNELS = [
    {
        "id": "C01",
        "name": "general",
        "created": 1700000000,
        "creator": "U01",
        "is_general": True,
        "members": ["U01", "U02"],
        "topic": {"value": "Company-wide", "creator": "U01", "last_set": 0},
        "purpose": {"value": "", "creator": "", "last_set": 0},
    },
    {"id": "C02", "name": "eng", "created": 1700000001, "members": ["U01"]},
]
GROUPS = [{"id": "G01", "name": "secret", "created": 1700000002, "members": ["U01", "U02"]}]
DMS = [{"id": "D01", "created": 1700000003, "members": ["U01", "U02"]}]
MPIMS = [
    {
        "id": "G02",
        "name": "mpdm-alice--bob--chloé-1",
        "created": 1700000004,
        "members": ["U01", "U02", "U03"],
    }
]


def msg(ts: str, text: str, user: str = "U01", **extra: Any) -> dict[str, Any]:
    """A plain user message."""
    return {"type": "message", "user": user, "text": text, "ts": ts, **extra}


def default_members() -> dict[str, Any]:
    """Member path -> JSON value (or raw bytes) of a small all-conversations export."""
    return {
        "users.json": USERS,
        "channels.json": CHANNELS,
        "groups.json": GROUPS,
        "dms.json": DMS,
        "mpims.json": MPIMS,
        "general/2024-01-02.json": [
            msg(
                "1704200000.000100",
                "Deploy v2.3.1 failed with ERR-42",
                reply_count=2,
                thread_ts="1704200000.000100",
                reactions=[{"name": "eyes", "count": 1, "users": ["U02"]}],
            ),
            msg(
                "1704200060.000200",
                "looking at it",
                user="U02",
                thread_ts="1704200000.000100",
                parent_user_id="U01",
            ),
            msg(
                "1704200120.000300",
                "fixed: password auth 28P01",
                subtype="thread_broadcast",
                thread_ts="1704200000.000100",
                edited={"user": "U01", "ts": "1704200130.000000"},
            ),
        ],
        "general/2024-01-03.json": [
            {
                "type": "message",
                "subtype": "bot_message",
                "bot_id": "B01",
                "username": "CI",
                "bot_profile": {"id": "B01", "name": "ci-bot"},
                "text": "build 17 green",
                "ts": "1704290000.000001",
                "attachments": [{"title": "Build 17", "text": "all tests passed"}],
            },
            msg(
                "1704290100.000002",
                "notes attached",
                files=[
                    {
                        "id": "F01",
                        "name": "notes.txt",
                        "title": "Meeting notes",
                        "mimetype": "text/plain",
                        "size": 12,
                        "url_private": "https://files.slack.com/F01/notes.txt",
                    }
                ],
            ),
            msg("1704290200.000003", "", subtype="channel_join", user="U02"),
        ],
        "secret/2024-01-02.json": [msg("1704200500.000001", "private plans")],
        "D01/2024-01-02.json": [msg("1704200600.000001", "hi bob")],
        "mpdm-alice--bob--chloé-1/2024-01-03.json": [msg("1704290300.000001", "group hello")],
        "eng/2024-01-04.json": [msg("1704380000.000001", "eng day", user="U03")],
    }


def write_export(path: Path, members: dict[str, Any], *, as_zip: bool = True) -> Path:
    """Write members (JSON values, or bytes written as is) as a ZIP or a folder."""

    def encode(value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        return json.dumps(value, ensure_ascii=False).encode("utf-8")

    if as_zip:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, value in members.items():
                archive.writestr(name, encode(value))
    else:
        for name, value in members.items():
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(encode(value))
    return path


def snapshot(db_path: Path) -> dict[str, list[tuple[Any, ...]]] | None:
    """Every row of every table, sorted (None when the store file does not exist)."""
    if not db_path.exists():
        return None
    with duckdb.connect(str(db_path), read_only=True) as connection:
        tables = [row[0] for row in connection.execute("show tables").fetchall()]
        return {
            table: sorted(connection.execute(f"select * from {table}").fetchall(), key=repr)
            for table in tables
        }


def query(db_path: Path, sql: str, parameters: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run one read-only query against the store."""
    with duckdb.connect(str(db_path), read_only=True) as connection:
        return connection.execute(sql, parameters or []).fetchall()


@pytest.fixture
def export_zip(tmp_path: Path) -> Path:
    """The default export as `Acme Slack export Jan 2 2024 - Jan 4 2024.zip`."""
    return write_export(
        tmp_path / "Acme Slack export Jan 2 2024 - Jan 4 2024.zip", default_members()
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """The importer's wall clock, fake: `clock("2024-01-07T00:00")` (UTC) sets it."""
    now = [datetime(2024, 1, 1, tzinfo=UTC)]

    class FakeDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # every reading is UTC
            return now[0]

    monkeypatch.setattr(importer, "datetime", FakeDatetime)

    def set_clock(moment: str) -> None:
        now[0] = datetime.fromisoformat(moment).replace(tzinfo=UTC)

    return set_clock
