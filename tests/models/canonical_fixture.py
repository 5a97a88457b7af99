"""A tiny, realistic canonical store built straight from schema.sql, without the importer.

The rows cover every projection rule the tests check: mentions (resolved, labelled,
unknown), channel links, broadcasts, user groups, dates, links, code, formatting,
emoji, accents, a thread with an edited reply and a broadcast, a deleted message,
a deleted thread root, a channel join, a bot message, a DM and a group DM.
"""

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb

SCHEMA_SQL = Path(__file__).resolve().parents[2] / "slackquery" / "canonical" / "schema.sql"

WORKSPACE = "T0ACME"
RUN = "run-1"
CHANGED_AT = "2024-03-01 12:00:00+00"

CHANNELS = [
    # channel_id, name, conversation_type
    ("C0GENERAL", "general", "public_channel"),
    ("C0INCIDENT", "incidents", "public_channel"),
    ("G0SECRET", "secret-plans", "private_channel"),
    ("D0ANNBOB", "bob", "im"),
    ("C0MPIM", "mpdm-ann--bob--cy-1", "mpim"),
]

USERS = [
    # user_id, username, real_name, display_name, is_bot
    ("U024BE7LH", "ann", "Ann Lee", "Annie", False),
    ("U0BOB", "bob", "Bob Stone", "", False),
    ("U0CY", "cy", None, None, False),
    ("U0ZOE", "zoe", "Zoë Çelik", "Zoë", False),
    ("B0DEPLOY", "deploybot", "Deploy Bot", "", True),
]
# The users' JSON where it matters: Cy is a single-channel guest.
USER_JSON = {"U0CY": '{"id": "U0CY", "is_restricted": true, "is_ultra_restricted": true}'}

# Thread in #incidents rooted at 1700000100.000100.
ROOT_TS = "1700000100.000100"


def message(
    channel_id: str,
    ts: str,
    text: str,
    *,
    user_id: str | None = "U024BE7LH",
    subtype: str | None = None,
    thread_ts: str | None = None,
    is_thread_parent: bool = False,
    is_broadcast: bool = False,
    is_edited: bool = False,
    is_deleted: bool = False,
    is_bot: bool = False,
    bot_id: str | None = None,
    username: str | None = None,
    search_text: str | None = None,
    reactions: list[dict] | None = None,
    file_ids: list[str] | None = None,
) -> dict:
    """One canonical `messages` row with derived keys and a payload hash of its content."""
    seconds, micros = ts.split(".")
    key = f"{WORKSPACE}:{channel_id}:{ts}"
    row = {
        "message_key": key,
        "workspace_id": WORKSPACE,
        "channel_id": channel_id,
        "ts": ts,
        "ts_us": int(seconds) * 1_000_000 + int(micros),
        "user_id": user_id,
        "bot_id": bot_id,
        "username": username,
        "subtype": subtype,
        "text": text,
        "search_text": search_text if search_text is not None else text,
        "thread_ts": thread_ts,
        "is_thread_parent": is_thread_parent,
        "is_thread_reply": thread_ts is not None and thread_ts != ts,
        "is_thread_broadcast": is_broadcast,
        "reply_count": None,
        "is_edited": is_edited,
        "edited_ts": None,
        "is_deleted": is_deleted,
        "is_bot": is_bot,
        "reactions": json.dumps(reactions) if reactions is not None else None,
        "file_ids": file_ids,
        "source_message_id": key,
    }
    row["payload_hash"] = payload_hash(row)
    return row


def payload_hash(row: dict) -> str:
    """sha256 of the row's content, as the importer computes a canonical payload hash."""
    content = {k: v for k, v in row.items() if k != "payload_hash"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()


MESSAGES = [
    message(
        "C0GENERAL",
        "1700000000.000100",
        "Hi <@U024BE7LH> and <@U0BOB|bobby>, also <@U0NOBODY>: see <#C0INCIDENT|incidents> "
        "and <#C0GENERAL> <!here> <!subteam^S0ENG|@eng-team> (not <#G0SECRET|secret-plans>)",
        user_id="U0BOB",
        reactions=[{"name": "thumbsup", "count": 2, "users": ["U0CY", "U0ZOE"]}],
    ),
    message(
        "C0GENERAL",
        "1700000001.000200",
        "Deploy *v2.3.1* is _done_ ~maybe~ &amp; "
        "<https://ci.example.com/run?id=7&amp;x=1|the CI run> or <https://status.example.com>"
        " :white_check_mark: :thumbsup::skin-tone-2:",
        user_id="U0ZOE",
    ),
    message(
        "C0GENERAL",
        "1700000002.000300",
        "Run `SELECT *bold* FROM t` then\n```\nif a &lt; b &amp;&amp; c:\n    x_y_z = *keep*\n```\n"
        "due <!date^1392734382^{date_short}|Feb 18, 2014> café naïve\x00Привет",
        user_id="U0CY",
    ),
    message("C0GENERAL", "1700000003.000400", "", user_id="U0BOB", subtype="channel_join"),
    message("C0GENERAL", "1700000004.000500", "oops wrong channel", is_deleted=True),
    message("C0GENERAL", "1700000005.000600", "   ", user_id="U0BOB"),
    message(
        "C0GENERAL",
        "1700000006.000700",
        "build failed with ERR-42",
        user_id=None,
        bot_id="B0DEPLOY",
        username="deploybot",
        subtype="bot_message",
        is_bot=True,
    ),
    message(
        "C0INCIDENT",
        ROOT_TS,
        "db down: error 28P01 for <@U024BE7LH>",
        user_id="U0BOB",
        thread_ts=ROOT_TS,
        is_thread_parent=True,
        file_ids=["F0LOG"],
    ),
    message(
        "C0INCIDENT",
        "1700000160.000200",
        "rotating the password now",
        thread_ts=ROOT_TS,
        is_edited=True,
    ),
    message(
        "C0INCIDENT",
        "1700000220.000300",
        "fixed, see <https://wiki.example.com/pg|runbook>",
        user_id="U0ZOE",
        thread_ts=ROOT_TS,
        subtype="thread_broadcast",
        is_broadcast=True,
    ),
    message(
        "C0INCIDENT",
        "1700000230.000400",
        "this reply was deleted",
        user_id="U0CY",
        thread_ts=ROOT_TS,
        is_deleted=True,
    ),
    # A thread whose root was deleted while its reply survived.
    message(
        "C0INCIDENT",
        "1700000300.000100",
        "This message was deleted.",
        user_id=None,
        subtype="tombstone",
        thread_ts="1700000300.000100",
        is_thread_parent=True,
        is_deleted=True,
    ),
    message(
        "C0INCIDENT",
        "1700000360.000200",
        "orphaned reply about pg_hba.conf",
        user_id="U0BOB",
        thread_ts="1700000300.000100",
    ),
    message("G0SECRET", "1700000400.000100", "secret launch plan", user_id="U0ZOE"),
    message("D0ANNBOB", "1700000500.000100", "lunch?", user_id="U0BOB"),
    message("C0MPIM", "1700000600.000100", "group chat hello", user_id="U0CY"),
]

FILES = [
    # file_id, message ts, channel, name, title, deleted in Slack
    ("F0LOG", ROOT_TS, "C0INCIDENT", "pg.log", "Postgres log", False),
    ("F0OLD", ROOT_TS, "C0INCIDENT", "old.log", None, True),
]


def build_canonical(path: Path, *, schema_version: int = 2) -> Path:
    """Create a canonical DuckDB at `path` from schema.sql and fill it with the rows above."""
    connection = duckdb.connect(str(path))
    try:
        connection.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
        connection.execute(
            "insert into schema_metadata values (?, ?::timestamptz)", [schema_version, CHANGED_AT]
        )
        connection.execute(
            "insert into workspaces values (?, 'acme', 'Acme Corp', 'https://acme.slack.com', "
            "'slack_export', ?, ?::timestamptz)",
            [WORKSPACE, RUN, CHANGED_AT],
        )
        for channel_id, name, kind in CHANNELS:
            connection.execute(
                "insert into channels (workspace_id, channel_id, name, conversation_type, "
                "is_archived, is_general, export_folder, payload_hash, latest_run_id, "
                "last_changed_at) values (?, ?, ?, ?, false, ?, ?, ?, ?, ?::timestamptz)",
                [
                    WORKSPACE,
                    channel_id,
                    name,
                    kind,
                    name == "general",
                    name,
                    hashlib.sha256(name.encode()).hexdigest(),
                    RUN,
                    CHANGED_AT,
                ],
            )
        for user_id, username, real_name, display_name, is_bot in USERS:
            connection.execute(
                "insert into users (workspace_id, user_id, username, real_name, display_name, "
                "is_bot, is_deleted, is_admin, raw_json, payload_hash, latest_run_id, "
                "last_changed_at) values (?, ?, ?, ?, ?, ?, false, false, ?, ?, ?, ?::timestamptz)",
                [
                    WORKSPACE,
                    user_id,
                    username,
                    real_name,
                    display_name,
                    is_bot,
                    USER_JSON.get(user_id),
                    hashlib.sha256(user_id.encode()).hexdigest(),
                    RUN,
                    CHANGED_AT,
                ],
            )
        for row in MESSAGES:
            insert_message(connection, row)
        for file_id, ts, channel_id, name, title, is_deleted in FILES:
            connection.execute(
                "insert into files (workspace_id, file_id, message_key, channel_id, message_ts, "
                "name, title, mimetype, size, is_deleted, payload_hash, latest_run_id, "
                "last_changed_at) values (?, ?, ?, ?, ?, ?, ?, 'text/plain', 10, ?, ?, ?, "
                "?::timestamptz)",
                [
                    WORKSPACE,
                    file_id,
                    f"{WORKSPACE}:{channel_id}:{ts}",
                    channel_id,
                    ts,
                    name,
                    title,
                    is_deleted,
                    hashlib.sha256(file_id.encode()).hexdigest(),
                    RUN,
                    CHANGED_AT,
                ],
            )
    finally:
        connection.close()
    return path


def insert_message(connection: duckdb.DuckDBPyConnection, row: dict) -> None:
    """Insert one row made by `message()` into canonical `messages`."""
    seconds = int(row["ts"].split(".")[0])
    columns = {
        **row,
        "conversation_day": datetime.fromtimestamp(seconds, UTC).date(),
        "raw_json": None,
        "first_seen_run_id": RUN,
        "latest_run_id": RUN,
        "last_changed_at": CHANGED_AT,
    }
    connection.execute(
        f"insert into messages ({', '.join(columns)}) values ({', '.join('?' for _ in columns)})",
        list(columns.values()),
    )
