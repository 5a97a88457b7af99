"""Pure conversions from Slack objects to canonical rows: ts arithmetic, hashes, flags.

Kept free of I/O so the hot loop of the importer is just these functions, and so the rules
(what makes a thread parent, what goes into `search_text`) are testable on their own.
"""

import hashlib
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

import orjson

SORTED = orjson.OPT_SORT_KEYS
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SLACK_ID = re.compile(r"[A-Z0-9]+")

# Column order of the `stage_messages` table; `message_row` returns tuples in this order.
MESSAGE_COLUMNS = (
    "message_key",
    "workspace_id",
    "channel_id",
    "ts",
    "ts_us",
    "user_id",
    "bot_id",
    "username",
    "subtype",
    "text",
    "search_text",
    "thread_ts",
    "is_thread_parent",
    "is_thread_reply",
    "is_thread_broadcast",
    "reply_count",
    "is_edited",
    "edited_ts",
    "is_deleted",
    "is_bot",
    "reactions",
    "file_ids",
    "source_message_id",
    "conversation_day",
    "raw_json",
    "payload_hash",
)


def ts_to_us(ts: str) -> int:
    """Exact microseconds from a Slack ts string (`"1700000000.123456"`), by string split.

    A float would lose the last digit for current epochs, and ts is the message id.
    Raises ValueError for anything that is not digits, an optional dot and up to 6 digits.
    """
    seconds, dot, fraction = ts.partition(".")
    if not seconds.isdigit() or not seconds.isascii() or len(fraction) > 6:
        raise ValueError(f"not a Slack ts: {ts!r}")
    if dot and not (fraction.isdigit() and fraction.isascii()):
        raise ValueError(f"not a Slack ts: {ts!r}")
    return int(seconds) * 1_000_000 + (int(fraction.ljust(6, "0")) if fraction else 0)


def us_to_ts(ts_us: int) -> str:
    """The canonical Slack ts string for microseconds since the epoch."""
    return f"{ts_us // 1_000_000}.{ts_us % 1_000_000:06d}"


def datetime_to_us(moment: datetime) -> int:
    """Exact microseconds since the epoch (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def us_to_datetime(ts_us: int) -> datetime:
    """The UTC moment of microseconds since the epoch, exactly (a float division rounds the
    last microsecond of the year 9999 up into the year 10000)."""
    return EPOCH + timedelta(microseconds=ts_us)


# The last microsecond of the year 9999. A later ts is no datetime (it has no conversation
# day, and every reader that turns ts_us into a date would fail on it), and one past 2**63
# µs is not even a bigint: no writer stores a message with a ts after it (`message_ts`).
LAST_STORABLE_US = datetime_to_us(datetime.max.replace(tzinfo=UTC))
# Below 2**32 seconds (the year 2106) a double is closer than half a microsecond to the
# decimal it was parsed from, so a ts written as a JSON number still names one message.
_EXACT_NUMBER_TS = 2**32


def number_ts_to_us(value: int | float) -> int:
    """Exact microseconds of a ts that an export wrote as a JSON number, not a string.

    Raises ValueError unless it converts exactly: an integer, or a number below 2**32 s
    whose shortest decimal form has at most 6 decimals (the form it was written in).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"not a Slack ts: {value!r}")
    if isinstance(value, int):
        return value * 1_000_000
    decimal = Decimal(repr(value))
    exponent = decimal.as_tuple().exponent
    if value >= _EXACT_NUMBER_TS or not isinstance(exponent, int) or exponent < -6:
        raise ValueError(f"not an exact Slack ts: {value!r}")
    return int(decimal.scaleb(6))


class TsAfterYear9999(ValueError):
    """A well-formed ts that no datetime can hold (see `LAST_STORABLE_US`)."""


def message_ts(value: Any, *, allow_number: bool = False) -> tuple[str, int]:
    """`(ts, ts_us)` of a message's `ts` (a string, or a number when `allow_number`): its
    canonical string (`us_to_ts`) and its microseconds.

    Canonical, because the ts string is the message's key and goes into its permalink:
    `"01709556215.249305"` is the message `"1709556215.249305"`, not a second one. Raises
    ValueError when there is none, and `TsAfterYear9999` when it lies after
    `LAST_STORABLE_US`. The one rule for what ts a stored message may have (import and sync).
    """
    if isinstance(value, str):
        ts_us = ts_to_us(value)
    elif allow_number and isinstance(value, int | float) and not isinstance(value, bool):
        ts_us = number_ts_to_us(value)
    else:
        raise ValueError(f"not a Slack ts: {value!r}")
    ts = us_to_ts(ts_us)
    if ts_us > LAST_STORABLE_US:
        raise TsAfterYear9999(ts)
    return ts, ts_us


def canonical_ts(value: Any) -> str | None:
    """The canonical string of a ts that refers to a message (`thread_ts`, `edited.ts`),
    written as a string or an exact number; None when it is neither.

    Canonical for the same reason as `message_ts`: a reply joins its root by string.
    """
    try:
        return us_to_ts(ts_to_us(value) if isinstance(value, str) else number_ts_to_us(value))
    except ValueError:
        return None


def is_slack_id(value: str) -> bool:
    """True for a Slack object id (`C0123ABCD`): uppercase ASCII letters and digits.

    Ids go unescaped into permalinks and into colon-separated keys (`T…:C…:ts`), so an
    input's id with any other character would break both.
    """
    return bool(_SLACK_ID.fullmatch(value))


def seconds_to_datetime(value: Any) -> datetime | None:
    """A UTC datetime from epoch seconds (`created`), None when not a number or out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return EPOCH + timedelta(seconds=value)
    except (OverflowError, ValueError):
        return None


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of a payload: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(value, option=SORTED)


def payload_hash(canonical: bytes) -> str:
    """sha256 hex of canonical JSON bytes."""
    return hashlib.sha256(canonical).hexdigest()


def search_text(message: dict[str, Any], text: str) -> str:
    """Message text plus the titles and texts of attachments and files, one per line.

    Not normalised: the projection owns mrkdwn handling. Duplicates (an attachment's
    fallback equal to its text) are dropped so lexical scores are not inflated.
    """
    parts = [text] if text else []
    attachments = message.get("attachments")
    if isinstance(attachments, list):
        for attachment in attachments:
            if not isinstance(attachment, dict):
                continue
            for field in ("pretext", "title", "text", "fallback"):
                value = attachment.get(field)
                if isinstance(value, str) and value and value not in parts:
                    parts.append(value)
    for file in message_files(message):
        for field in ("title", "name"):
            value = file.get(field)
            if isinstance(value, str) and value and value not in parts:
                parts.append(value)
    return "\n".join(parts)


def message_files(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The message's file objects: `files`, or the legacy single `file`."""
    files = message.get("files")
    if isinstance(files, list):
        return [file for file in files if isinstance(file, dict)]
    legacy = message.get("file")
    return [legacy] if isinstance(legacy, dict) else []


def is_thread_parent(message: dict[str, Any], ts: str, thread_ts: str | None) -> bool:
    """A parent starts a thread that has replies: thread_ts == ts and some reply evidence.

    The importer also marks a root as parent when one of its replies is in the same export
    (older exports lack `reply_count`).
    """
    if thread_ts != ts:
        return False
    return bool(message.get("reply_count") or message.get("replies") or message.get("latest_reply"))


# The values of the `reply_count` (DuckDB `integer`) and `files.size` (`bigint`) columns.
INTEGER_RANGE = range(-(2**31), 2**31)
BIGINT_RANGE = range(-(2**63), 2**63)


def unstorable(message: dict[str, Any]) -> str | None:
    """Why `message_row` and `file_row` cannot make rows of this message, or None.

    Most fields of the wrong kind are only left out of the row (a `bot_id` that is not a
    string); these would break it.
    """
    user = message.get("user")
    if user is not None and not isinstance(user, str):
        return f"has a user that is not a user id ({type(user).__name__})"
    reply_count = message.get("reply_count")
    if isinstance(reply_count, int) and reply_count not in INTEGER_RANGE:
        return "has a reply_count out of range"
    sizes = [file.get("size") for file in message_files(message)]
    if any(isinstance(size, int) and size not in BIGINT_RANGE for size in sizes):
        return "shares a file whose size is out of range"
    return None


def thread_ts_of(message: dict[str, Any]) -> str | None:
    """The message's `thread_ts` in canonical form, else None (`unreadable_ts` says why)."""
    return canonical_ts(message.get("thread_ts"))


def edited_ts_of(message: dict[str, Any]) -> str | None:
    """The canonical `edited.ts` of the message, else None (`unreadable_ts` says why)."""
    edited = message.get("edited")
    return canonical_ts(edited.get("ts")) if isinstance(edited, dict) else None


def unreadable_ts(message: dict[str, Any]) -> list[str]:
    """What `message_row` leaves out because it is not a ts: `thread_ts` (the message is
    then stored unthreaded) and `edited.ts` (edited at an unknown time), for warnings.

    A message with a `thread_ts` it cannot read is kept rather than skipped: its text is
    worth more than the thread it cannot be joined to.
    """
    problems = []
    thread_ts = message.get("thread_ts")
    if thread_ts is not None and thread_ts_of(message) is None:
        problems.append(f"has an unreadable thread_ts ({thread_ts!r}): stored unthreaded")
    edited = message.get("edited")
    edited_ts = edited.get("ts") if isinstance(edited, dict) else None
    if edited_ts is not None and edited_ts_of(message) is None:
        problems.append(f"has an unreadable edited.ts ({edited_ts!r}): ignored")
    return problems


def message_row(
    message: dict[str, Any],
    *,
    workspace_id: str,
    channel_id: str,
    ts: str,
    ts_us: int,
    day: str,
    canonical: bytes,
    source_message_id: str | None = None,
    bot_user_ids: frozenset[str] | set[str] = frozenset(),
) -> tuple[Any, ...]:
    """One `stage_messages` row (MESSAGE_COLUMNS order) from a parsed Slack message.

    `search_text` is None when it equals `text`; the merge fills it in (see store).
    """
    message_key = f"{workspace_id}:{channel_id}:{ts}"
    subtype = message.get("subtype")
    user = message.get("user")
    bot_id = message.get("bot_id")
    text = message.get("text")
    if not isinstance(text, str):
        text = ""
    thread_ts = thread_ts_of(message)
    edited = message.get("edited")
    reactions = message.get("reactions")
    files = message_files(message)
    file_ids = [file["id"] for file in files if isinstance(file.get("id"), str)]
    reply_count = message.get("reply_count")
    return (
        message_key,
        workspace_id,
        channel_id,
        ts,
        ts_us,
        user if isinstance(user, str) else (bot_id if isinstance(bot_id, str) else None),
        bot_id if isinstance(bot_id, str) else None,
        message.get("username") if isinstance(message.get("username"), str) else None,
        subtype if isinstance(subtype, str) else None,
        text,
        searchable if (searchable := search_text(message, text)) != text else None,
        thread_ts,
        is_thread_parent(message, ts, thread_ts),
        thread_ts is not None and thread_ts != ts,
        subtype == "thread_broadcast",
        reply_count if isinstance(reply_count, int) else None,
        isinstance(edited, dict),
        edited_ts_of(message),
        subtype == "tombstone",
        isinstance(bot_id, str) or subtype == "bot_message" or user in bot_user_ids,
        orjson.dumps(reactions).decode() if isinstance(reactions, list) and reactions else None,
        orjson.dumps(file_ids).decode() if file_ids else None,
        source_message_id or message_key,
        day,
        canonical.decode(),
        payload_hash(canonical),
    )


class UserRow(NamedTuple):
    """One `users` row (field order = column order of the table and its stage table)."""

    workspace_id: str
    user_id: str
    username: str | None
    real_name: str | None
    display_name: str | None
    title: str | None
    tz: str | None
    is_bot: bool
    is_deleted: bool
    is_admin: bool
    raw_json: str
    payload_hash: str


class ChannelRow(NamedTuple):
    """One `channels` row; `member_ids` is a JSON list (the stage cast makes it varchar[])."""

    workspace_id: str
    channel_id: str
    name: str
    conversation_type: str
    is_archived: bool
    is_general: bool
    created_at: datetime | None
    creator_id: str | None
    topic: str | None
    purpose: str | None
    member_ids: str
    export_folder: str
    raw_json: str
    payload_hash: str


class FileRow(NamedTuple):
    """One staged `files` row: the table's columns plus the sharing message's ts_us."""

    workspace_id: str
    file_id: str
    message_key: str
    channel_id: str
    message_ts: str
    name: str | None
    title: str | None
    mimetype: str | None
    size: int | None
    local_object_path: str | None
    url_private: str | None
    is_deleted: bool
    payload_hash: str
    message_ts_us: int


def raw_columns(raw: Any) -> tuple[str, str]:
    """`(raw_json, payload_hash)` of a payload, as every canonical row stores them."""
    canonical = canonical_json(raw)
    return canonical.decode(), payload_hash(canonical)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def slack_user_row(workspace_id: str, entry: dict[str, Any]) -> UserRow:
    """The users row of a Slack user object (users.json entry or `users.list` member)."""
    profile = entry.get("profile") if isinstance(entry.get("profile"), dict) else {}
    raw_json, digest = raw_columns(entry)
    return UserRow(
        workspace_id=workspace_id,
        user_id=entry["id"],
        username=_text(entry.get("name")),
        real_name=_text(entry.get("real_name")) or _text(profile.get("real_name")),
        display_name=_text(profile.get("display_name")),
        title=_text(profile.get("title")),
        tz=_text(entry.get("tz")),
        is_bot=bool(entry.get("is_bot")),
        is_deleted=bool(entry.get("deleted")),
        is_admin=bool(entry.get("is_admin")),
        raw_json=raw_json,
        payload_hash=digest,
    )


def slack_channel_row(
    workspace_id: str,
    entry: dict[str, Any],
    *,
    conversation_type: str,
    folder: str,
    handle: Callable[[str], str],
) -> ChannelRow:
    """The channels row of a Slack conversation object (export list entry or API object).

    A DM or group DM is named by its members' handles (`handle(user_id)`), sorted.
    """
    channel_id = entry["id"]
    listed = entry.get("members")
    members = (
        [member for member in listed if isinstance(member, str)] if isinstance(listed, list) else []
    )
    if conversation_type in ("im", "mpim"):
        if not members and isinstance(entry.get("user"), str):
            members = [entry["user"]]
        handles = sorted({handle(member) for member in members})
        name = ", ".join(handles) or str(entry.get("name") or channel_id)
    else:
        name = str(entry.get("name") or channel_id)
    created = entry.get("created")
    topic = entry.get("topic")
    purpose = entry.get("purpose")
    raw_json, digest = raw_columns(entry)
    return ChannelRow(
        workspace_id=workspace_id,
        channel_id=channel_id,
        name=name,
        conversation_type=conversation_type,
        is_archived=bool(entry.get("is_archived")),
        is_general=bool(entry.get("is_general")),
        created_at=seconds_to_datetime(created),
        creator_id=_string(entry.get("creator")),
        topic=topic.get("value") or None if isinstance(topic, dict) else None,
        purpose=purpose.get("value") or None if isinstance(purpose, dict) else None,
        member_ids=orjson.dumps(members).decode(),
        export_folder=folder,
        raw_json=raw_json,
        payload_hash=digest,
    )


def file_row(
    file: dict[str, Any],
    *,
    workspace_id: str,
    message_key: str,
    channel_id: str,
    ts: str,
    ts_us: int,
    local_paths: dict[str, str],
) -> FileRow | None:
    """The staged files row of one file object a message shares (None without an id).

    `local_paths` maps file ids to the copies an export holds (slackdump layouts).
    """
    file_id = file.get("id")
    if not isinstance(file_id, str):
        return None
    size = file.get("size")
    return FileRow(
        workspace_id=workspace_id,
        file_id=file_id,
        message_key=message_key,
        channel_id=channel_id,
        message_ts=ts,
        name=_string(file.get("name")),
        title=_string(file.get("title")),
        mimetype=_string(file.get("mimetype")),
        size=size if isinstance(size, int) else None,
        local_object_path=local_paths.get(file_id),
        url_private=_string(file.get("url_private")),
        is_deleted=file.get("mode") == "tombstone",
        payload_hash=payload_hash(canonical_json(file)),
        message_ts_us=ts_us,
    )
