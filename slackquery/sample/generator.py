"""Writes the sample workspace as a standard Slack export ZIP, streaming one day file at a time.

Layout ("all conversations" export): `channels.json`, `groups.json`, `dms.json`,
`mpims.json`, `users.json`, `integration_logs.json`, and `<folder>/YYYY-MM-DD.json` for
every conversation-day with activity. Members are written in sorted order with a fixed
ZIP timestamp, and every random draw comes from generators seeded by (seed, conversation),
so the same seed and message count give a byte-identical ZIP.

How one conversation is generated: all its message times ("slots") are drawn up front
with numpy (a few MB even for a million messages), the planted messages are merged in at
their fixed times, and the slots are then walked in time order. A slot is a planted
message, a reply reserved earlier by a thread parent, or a new top-level message; a new
parent reserves its 1-20 reply slots among the following free slots at once, so it knows
its reply count and latest reply when it is written. Day files are flushed as the walk
crosses midnight (UTC), so memory never holds more than one day of one conversation.
"""

import os
import random
import uuid
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import orjson
import yaml

from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.sample import judged, planted, vocab
from slackquery.sample.judged import build_judged_set
from slackquery.sample.text import TextGenerator, weighted_table, zipf_table
from slackquery.sample.workspace import (
    BASE_CONVERSATIONS,
    DAY_SECONDS,
    DEPLOYBOT,
    EPOCH_START,
    PAGER_BOT_ID,
    PAGER_BOT_NAME,
    TEAM_DOMAIN,
    TEAM_ID,
    USER_BY_NAME,
    USERS,
    Conversation,
    User,
    project_conversations,
)

MIN_MESSAGES = 100
MAX_MESSAGES = 20_000_000
ZIP_DATE = (2024, 1, 1, 0, 0, 0)
DAY_US = DAY_SECONDS * 1_000_000
_JSON = orjson.OPT_INDENT_2

# Thread sizes 1-20, small threads far more common than long ones.
_REPLY_COUNTS = weighted_table([(count, 1.0 / count**1.3) for count in range(1, 21)], size=512)
_SYSTEM_KINDS = weighted_table(
    [
        ("channel_join", 0.45),
        ("channel_leave", 0.12),
        ("channel_topic", 0.1),
        ("channel_purpose", 0.05),
        ("pinned_item", 0.2),
        ("reminder_add", 0.08),
    ]
)


def timeline_days(messages: int) -> int:
    """Days the sample spans: at least 60 (the planted facts' window), at most two years."""
    return min(730, max(60, messages // 1400))


def _ts(t_us: int) -> str:
    return f"{t_us // 1_000_000}.{t_us % 1_000_000:06d}"


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3
    info.external_attr = 0o644 << 16
    return info


def _write(archive: zipfile.ZipFile, name: str, payload: object) -> None:
    archive.writestr(_zip_info(name), orjson.dumps(payload, option=_JSON), compresslevel=1)


@dataclass
class _Stats:
    """Counts the summary reports; summed over conversations."""

    messages: int = 0
    threads: int = 0
    replies: int = 0
    broadcasts: int = 0
    bot_messages: int = 0
    system_messages: int = 0
    files: int = 0
    edited: int = 0
    day_files: int = 0
    per_conversation: dict[str, int] = field(default_factory=dict)
    first_day: int | None = None
    last_day: int | None = None


@dataclass
class _Reply:
    """A reply slot reserved by a thread parent."""

    thread_ts: str
    parent_user: str
    author: str
    topic: str
    broadcast: bool
    root: dict | None


def _allocate(total: int, weights: list[float]) -> list[int]:
    """Split `total` into integer shares proportional to `weights` (largest remainder)."""
    scale = sum(weights)
    raw = [total * weight / scale for weight in weights]
    shares = [int(value) for value in raw]
    order = sorted(range(len(raw)), key=lambda index: (shares[index] - raw[index], index))
    for index in order[: total - sum(shares)]:
        shares[index] += 1
    return shares


def _user_json(user: User) -> dict:
    first = user.real_name.split()[0]
    profile = {
        "title": user.title,
        "phone": "",
        "real_name": user.real_name,
        "real_name_normalized": user.real_name,
        "display_name": user.display_name,
        "display_name_normalized": user.display_name,
        "status_text": "",
        "status_emoji": "",
        "image_72": f"https://avatars.slack-edge.example/{user.id}_72.png",
        "first_name": first,
        "team": TEAM_ID,
    }
    if user.is_bot:
        profile["bot_id"] = user.bot_id
    elif not user.deleted:
        profile["email"] = f"{user.name}@{TEAM_DOMAIN}.example"
    return {
        "id": user.id,
        "team_id": TEAM_ID,
        "name": user.name,
        "deleted": user.deleted,
        "real_name": user.real_name,
        "tz": user.tz,
        "tz_label": user.tz_label,
        "tz_offset": user.tz_offset,
        "profile": profile,
        "is_admin": user.is_admin,
        "is_owner": user.name == "ingrid",
        "is_bot": user.is_bot,
        "is_app_user": False,
        "is_restricted": False,
        "is_ultra_restricted": False,
        "updated": EPOCH_START - 86_400,
    }


def _conversation_json(conversation: Conversation) -> dict:
    created = EPOCH_START + conversation.created_day * DAY_SECONDS
    if conversation.kind == "dm":
        return {"id": conversation.id, "created": created, "members": list(conversation.members)}
    entry: dict = {"id": conversation.id, "name": conversation.name, "created": created}
    entry["creator"] = conversation.creator
    entry["is_archived"] = conversation.is_archived
    if conversation.kind != "group_dm":
        entry["is_general"] = conversation.is_general
    entry["members"] = list(conversation.members)
    entry["topic"] = {"value": conversation.topic, "creator": conversation.creator, "last_set": 0}
    entry["purpose"] = {
        "value": conversation.purpose,
        "creator": conversation.creator,
        "last_set": created,
    }
    return entry


class _ConversationWriter:
    """Generates and writes one conversation's day files (see the module docstring)."""

    def __init__(
        self,
        conversation: Conversation,
        background: int,
        days: int,
        seed: int,
        text_context: tuple,
        stats: _Stats,
        planted_messages: tuple[planted.PlantedMessage, ...] = planted.MESSAGES,
    ) -> None:
        self.conversation = conversation
        self.planted_messages = planted_messages
        self.planted_by_key = {item.key: item for item in planted_messages}
        self.background = background
        self.days = days
        self.stats = stats
        key = zlib.crc32(conversation.id.encode())
        self.rng = random.Random(f"slackquery-sample:{seed}:{conversation.id}")
        self.np_rng = np.random.default_rng([seed, key])
        self.text = TextGenerator(self.rng, conversation, *text_context)
        humans = [member for member in conversation.members if member != DEPLOYBOT.id]
        order = humans[:]
        self.rng.shuffle(order)
        self.authors = zipf_table(order, exponent=0.8, size=512)
        self.members = humans
        self.retired = {USER_BY_NAME["bjorn"].id}
        self.retire_after = days * 2 // 5
        self.base_day = EPOCH_START // DAY_SECONDS
        self.file_counter = 0
        self.thread_share = 0.05 if conversation.kind == "dm" else 0.12
        self.system_share = 0.0 if conversation.kind in ("dm", "group_dm") else 0.025

    # --- slot times --------------------------------------------------------------------
    def _background_times(self) -> np.ndarray:
        """Sorted, unique microsecond times whose millisecond remainder is never zero."""
        count = self.background
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        first = max(0, self.conversation.created_day)
        # An archived channel went quiet early: it only has history from the first weeks.
        last = self.days // 3 if self.conversation.is_archived else self.days
        day_index = np.arange(first, last)
        weekday = (day_index % 7) < 5  # day 0 is a Monday
        weights = np.where(weekday, 1.0, 0.12) * (1.0 + 0.6 * day_index / self.days)
        day = self.np_rng.choice(day_index, size=count, p=weights / weights.sum())
        working = self.np_rng.random(count) < 0.88
        seconds = np.where(
            working,
            np.clip(self.np_rng.normal(13 * 3600, 2.6 * 3600, count), 6 * 3600, 22 * 3600),
            self.np_rng.uniform(0, DAY_SECONDS, count),
        )
        millis = (EPOCH_START + day.astype(np.int64) * DAY_SECONDS) * 1000
        millis += (seconds * 1000).astype(np.int64)
        millis.sort()
        steps = np.arange(count, dtype=np.int64)
        millis = np.maximum.accumulate(millis - steps) + steps  # strictly increasing
        return millis * 1000 + self.np_rng.integers(1, 1000, size=count)

    # --- message builders -------------------------------------------------------------
    def _author(self, day: int) -> str:
        author = self.authors[int(self.rng.random() * len(self.authors))]
        if author in self.retired and day > self.retire_after:
            author = self.members[0] if self.members[0] not in self.retired else self.members[1]
        return author

    def _user_message(self, ts: str, user: str, text: str) -> dict:
        return {
            "user": user,
            "type": "message",
            "ts": ts,
            "client_msg_id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "text": text,
            "team": TEAM_ID,
        }

    def _decorate(self, message: dict, t_us: int, user: str) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.14:
            reactions = []
            for _ in range(1 if rng.random() < 0.75 else 2):
                count = 1 + int(rng.random() * min(4, len(self.members)))
                users = rng.sample(self.members, count)
                name = vocab.EMOJI[int(rng.random() * len(vocab.EMOJI))]
                if all(reaction["name"] != name for reaction in reactions):
                    reactions.append({"name": name, "users": users, "count": count})
            message["reactions"] = reactions
        if rng.random() < 0.05:
            edit_us = t_us + rng.randrange(20_000_000, 3_600_000_000)
            message["edited"] = {"user": user, "ts": _ts(edit_us)}
            self.stats.edited += 1
        if rng.random() < 0.03:
            message["files"] = [self._file(t_us, user)]
            message["upload"] = False
            self.stats.files += 1

    def _file(self, t_us: int, user: str) -> dict:
        self.file_counter += 1
        extension, mimetype, stem = vocab.FILE_KINDS[int(self.rng.random() * 5)]
        service = vocab.SERVICES[int(self.rng.random() * len(vocab.SERVICES))]
        file_id = f"F{zlib.crc32(self.conversation.id.encode()) % 1000:03d}{self.file_counter:07d}"
        name = f"{service}-{stem}.{extension}"
        private = f"https://files.slack.com/files-pri/{TEAM_ID}-{file_id}/{name}"
        return {
            "id": file_id,
            "created": t_us // 1_000_000,
            "timestamp": t_us // 1_000_000,
            "name": name,
            "title": f"{service} {stem}",
            "mimetype": mimetype,
            "filetype": extension,
            "pretty_type": extension.upper(),
            "user": user,
            "mode": "hosted",
            "size": self.rng.randrange(2_000, 4_000_000),
            "url_private": private,
            "url_private_download": f"{private}?dl=1",
            "permalink": f"https://{TEAM_DOMAIN}.slack.com/files/{user}/{file_id}/{name}",
        }

    def _system(self, ts: str, day: int) -> dict:
        user = self._author(day)
        kind = _SYSTEM_KINDS[int(self.rng.random() * len(_SYSTEM_KINDS))]
        message: dict = {"type": "message", "subtype": kind, "ts": ts, "user": user}
        if kind == "channel_join":
            message["text"] = f"<@{user}> has joined the channel"
        elif kind == "channel_leave":
            message["text"] = f"<@{user}> has left the channel"
        elif kind == "channel_topic":
            topic = vocab.SYSTEM_TOPICS[int(self.rng.random() * len(vocab.SYSTEM_TOPICS))]
            message["text"] = f"<@{user}> set the channel topic: {topic}"
            message["topic"] = topic
        elif kind == "channel_purpose":
            purpose = self.conversation.purpose
            message["text"] = f"<@{user}> set the channel purpose: {purpose}"
            message["purpose"] = purpose
        elif kind == "pinned_item":
            message["text"] = f"<@{user}> pinned a message to this channel."
            message["item_type"] = "C"
            message["pinned_info"] = {
                "channel": self.conversation.id,
                "pinned_by": user,
                "pinned_ts": int(ts.split(".")[0]),
            }
        else:
            message["text"] = (
                f"<@{user}> set up a reminder “post the weekly status” in this channel at "
                "9AM every Monday, Central European Time."
            )
        self.stats.system_messages += 1
        return message

    def _bot(self, ts: str) -> dict:
        self.stats.bot_messages += 1
        if self.conversation.name == "deploys":
            return {
                "type": "message",
                "subtype": "bot_message",
                "text": self.text.bot_deploy(),
                "ts": ts,
                "user": DEPLOYBOT.id,
                "bot_id": DEPLOYBOT.bot_id,
                "app_id": "A0SQDEPLOY",
                "bot_profile": {
                    "id": DEPLOYBOT.bot_id,
                    "name": DEPLOYBOT.name,
                    "app_id": "A0SQDEPLOY",
                    "team_id": TEAM_ID,
                },
            }
        return {
            "type": "message",
            "subtype": "bot_message",
            "text": self.text.bot_pager(),
            "ts": ts,
            "bot_id": PAGER_BOT_ID,
            "username": PAGER_BOT_NAME,
            "icons": {"emoji": ":pager:"},
        }

    def _reserve_thread(
        self, position: int, times: list[int], taken: bytearray, replies: dict, parent: dict
    ) -> None:
        """Make `parent` a thread: pick its reply slots now and record them on it."""
        rng = self.rng
        wanted = _REPLY_COUNTS[int(rng.random() * len(_REPLY_COUNTS))]
        chosen: list[int] = []
        end = min(len(times), position + 1 + 8 * wanted + 20)
        for slot in range(position + 1, end):
            if not taken[slot] and rng.random() < 0.55:
                chosen.append(slot)
                if len(chosen) == wanted:
                    break
        if not chosen:
            return
        parent_user = parent["user"]
        thread_ts = parent["ts"]
        authors = []
        for slot in chosen:
            taken[slot] = 1
            day = times[slot] // DAY_US - self.base_day
            author = parent_user if rng.random() < 0.3 else self._author(day)
            authors.append(author)
        root = None
        for slot, author in zip(chosen, authors, strict=True):
            broadcast = rng.random() < 0.06
            if broadcast and root is None:
                root = {
                    "user": parent_user,
                    "type": "message",
                    "ts": thread_ts,
                    "text": parent["text"],
                    "thread_ts": thread_ts,
                    "reply_count": len(chosen),
                }
            shared_root = root if broadcast else None
            topic = self.text.topic
            replies[slot] = _Reply(thread_ts, parent_user, author, topic, broadcast, shared_root)
        reply_users = list(dict.fromkeys(authors))
        parent["thread_ts"] = thread_ts
        parent["reply_count"] = len(chosen)
        parent["reply_users_count"] = len(reply_users)
        parent["latest_reply"] = _ts(times[chosen[-1]])
        parent["reply_users"] = reply_users[:5]
        parent["replies"] = [
            {"user": author, "ts": _ts(times[slot])}
            for slot, author in zip(chosen, authors, strict=True)
        ]
        self.stats.threads += 1

    def _reply(self, ts: str, plan: _Reply) -> dict:
        self.text.topic = plan.topic
        message = self._user_message(ts, plan.author, self.text.reply())
        message["thread_ts"] = plan.thread_ts
        message["parent_user_id"] = plan.parent_user
        if plan.broadcast:
            message["subtype"] = "thread_broadcast"
            message["root"] = plan.root
            self.stats.broadcasts += 1
        self.stats.replies += 1
        return message

    def _planted(self, item: planted.PlantedMessage, planted_threads: dict) -> dict:
        user = USER_BY_NAME[item.author].id
        rng = random.Random(item.key)
        message = {
            "user": user,
            "type": "message",
            "ts": item.ts,
            "client_msg_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "text": item.text,
            "team": TEAM_ID,
        }
        if item.edited_after_s:
            message["edited"] = {"user": user, "ts": _ts(item.ts_us + item.edited_after_s * 10**6)}
        if item.parent:
            parent = self.planted_by_key[item.parent]
            message["thread_ts"] = parent.ts
            message["parent_user_id"] = USER_BY_NAME[parent.author].id
            if item.broadcast:
                message["subtype"] = "thread_broadcast"
                message["root"] = {
                    "user": USER_BY_NAME[parent.author].id,
                    "type": "message",
                    "ts": parent.ts,
                    "text": parent.text,
                    "thread_ts": parent.ts,
                }
        thread = planted_threads.get(item.key)
        if thread:
            users = list(dict.fromkeys(USER_BY_NAME[reply.author].id for reply in thread))
            message["thread_ts"] = item.ts
            message["reply_count"] = len(thread)
            message["reply_users_count"] = len(users)
            message["latest_reply"] = thread[-1].ts
            message["reply_users"] = users
            message["replies"] = [
                {"user": USER_BY_NAME[reply.author].id, "ts": reply.ts} for reply in thread
            ]
        if item.reactions:
            message["reactions"] = [
                {
                    "name": name,
                    "users": [USER_BY_NAME[handle].id for handle in handles],
                    "count": len(handles),
                }
                for name, handles in item.reactions
            ]
        return message

    # --- the walk ---------------------------------------------------------------------
    def day_files(self) -> Iterator[tuple[str, list[dict]]]:
        """Yield (member name, messages) per day with activity, in date order."""
        conversation = self.conversation
        mine = sorted(
            (item for item in self.planted_messages if item.channel == conversation.name),
            key=lambda item: item.ts_us,
        )
        planted_threads: dict[str, list[planted.PlantedMessage]] = {}
        for item in mine:
            if item.parent:
                planted_threads.setdefault(item.parent, []).append(item)
        background = self._background_times()
        merged = np.concatenate([background, np.array([m.ts_us for m in mine], dtype=np.int64)])
        order = np.argsort(merged, kind="stable")
        times: list[int] = merged[order].tolist()
        planted_at = {
            int(position): mine[int(index) - len(background)]
            for position, index in enumerate(order)
            if index >= len(background)
        }
        taken = bytearray(len(times))
        for position in planted_at:
            taken[position] = 1
        replies: dict[int, _Reply] = {}
        rng = self.rng
        bot_share = conversation.bot_share
        system_cut = bot_share + self.system_share
        current_day = None
        day_messages: list[dict] = []
        for position, t_us in enumerate(times):
            day = t_us // DAY_US
            if day != current_day:
                if day_messages:
                    yield self._member(current_day), day_messages
                current_day, day_messages = day, []
            ts = _ts(t_us)
            if position in planted_at:
                message = self._planted(planted_at[position], planted_threads)
            elif position in replies:
                message = self._reply(ts, replies.pop(position))
            else:
                self.text.now = t_us // 1_000_000
                roll = rng.random()
                if roll < bot_share:
                    message = self._bot(ts)
                elif roll < system_cut:
                    message = self._system(ts, day - self.base_day)
                else:
                    user = self._author(day - self.base_day)
                    self.text.pick_topic()
                    if rng.random() < 0.003:
                        message = self._user_message(ts, user, "is looking at the dashboards")
                        message["subtype"] = "me_message"
                    else:
                        message = self._user_message(ts, user, self.text.message())
                        if rng.random() < self.thread_share:
                            self._reserve_thread(position, times, taken, replies, message)
                        self._decorate(message, t_us, user)
            day_messages.append(message)
        if day_messages:
            yield self._member(current_day), day_messages
        self.stats.messages += len(times)
        self.stats.per_conversation[conversation.folder] = len(times)
        if times:
            first, last = times[0] // DAY_US, times[-1] // DAY_US
            stats = self.stats
            stats.first_day = first if stats.first_day is None else min(stats.first_day, first)
            stats.last_day = last if stats.last_day is None else max(stats.last_day, last)

    def _member(self, day: int) -> str:
        return f"{self.conversation.folder}/{date.fromordinal(719163 + day).isoformat()}.json"


def _integration_logs() -> list[dict]:
    return [
        {
            "user_id": USER_BY_NAME["jose"].id,
            "user_name": "jose",
            "bot_id": DEPLOYBOT.bot_id,
            "app_type": "App",
            "service_name": "Deploybot",
            "date": str(EPOCH_START - 20 * DAY_SECONDS),
            "change_type": "added",
            "scope": "chat:write,channels:read",
        },
        {
            "user_id": USER_BY_NAME["bjorn"].id,
            "user_name": "bjorn",
            "service_id": PAGER_BOT_ID,
            "service_type": "Incoming WebHooks",
            "service_name": "PagerDuty",
            "date": str(EPOCH_START - 300 * DAY_SECONDS),
            "change_type": "added",
            "channel": "incidents",
        },
    ]


def generate_sample(out: Path, *, messages: int, seed: int = 7, judged_set: bool = False) -> dict:
    """Write the sample export ZIP and its judged query file; return a summary.

    `messages` is the exact number of message objects in the export (planted ones
    included). The query file is written next to the ZIP as `<stem>.queries.yaml`.
    With `judged_set`, the facts of `slackquery.sample.judged` are planted as well and
    their questions go to `<stem>.judged.yaml`; without it the export is exactly the
    plain sample. Files are written to temporary names and renamed, so a failed run
    leaves no half-written file behind.
    """
    if messages < MIN_MESSAGES or messages > MAX_MESSAGES:
        raise SlackqueryError(
            f"--messages must be between {MIN_MESSAGES} and {MAX_MESSAGES}, got {messages}"
        )
    if seed < 0:
        raise SlackqueryError(f"--seed must be a non-negative integer, got {seed}")
    out = Path(out)
    if out.suffix.lower() != ".zip":
        raise SlackqueryError(f"--out must name a .zip file, got {out}")
    if out.is_dir():
        raise SlackqueryError(f"--out {out} is a directory")
    make_folder(out.parent)  # often a home's own folder
    queries_path = out.with_name(f"{out.stem}.queries.yaml")
    judged_questions = build_judged_set(seed) if judged_set else None
    all_planted = planted.MESSAGES + (judged_questions.messages if judged_questions else ())
    if len(all_planted) >= messages:
        raise SlackqueryError(
            f"--messages must exceed the {len(all_planted)} planted messages, got {messages}"
        )

    days = timeline_days(messages)
    conversations = BASE_CONVERSATIONS + project_conversations(messages)
    shares = _allocate(
        messages - len(all_planted), [conversation.weight for conversation in conversations]
    )
    channel_links = [
        (conversation.id, conversation.name)
        for conversation in conversations
        if conversation.kind == "public"
    ]
    people = [(user.id, user.real_name.split()[0]) for user in USERS if not user.is_bot]
    text_context = (channel_links, people, planted.RESERVED_IDENTIFIERS)

    roots: dict[str, object] = {
        "channels.json": [_conversation_json(c) for c in conversations if c.kind == "public"],
        "groups.json": [_conversation_json(c) for c in conversations if c.kind == "private"],
        "dms.json": [_conversation_json(c) for c in conversations if c.kind == "dm"],
        "mpims.json": [_conversation_json(c) for c in conversations if c.kind == "group_dm"],
        "users.json": [_user_json(user) for user in USERS],
        "integration_logs.json": _integration_logs(),
    }
    entries: list[tuple[str, object]] = list(roots.items())
    entries += [
        (f"{conversation.folder}/", (conversation, share))
        for conversation, share in zip(conversations, shares, strict=True)
    ]
    entries.sort(key=lambda entry: entry[0])

    stats = _Stats()
    temporary = out.with_name(f".{out.name}.partial")
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
            for name, content in entries:
                if not name.endswith("/"):
                    _write(archive, name, content)
                    continue
                conversation, share = content
                writer = _ConversationWriter(
                    conversation, share, days, seed, text_context, stats, all_planted
                )
                for member, day_messages in writer.day_files():
                    _write(archive, member, day_messages)
                    stats.day_files += 1
        os.replace(temporary, out)
    finally:
        temporary.unlink(missing_ok=True)

    last = date.fromordinal(719163 + (stats.last_day or 0))
    request_time = f"{(last + timedelta(days=1)).isoformat()}T10:00:00+00:00"
    document = planted.query_document(request_time)
    _write_yaml(queries_path, document)
    extra: dict = {}
    if judged_questions is not None:
        judged_path = out.with_name(f"{out.stem}.judged.yaml")
        judged_document = judged.query_document(judged_questions, request_time)
        _write_yaml(judged_path, judged_document)
        answerable = sum(1 for entry in judged_document["queries"] if entry["answerable"])
        extra = {
            "judged_path": str(judged_path),
            "judged_facts": len(judged_questions.facts),
            "judged_answerable": answerable,
            "judged_unanswerable": len(judged_document["queries"]) - answerable,
        }

    kinds = Counter(conversation.kind for conversation in conversations)
    if stats.messages != messages:  # a bug in the allocation, never a user error
        raise RuntimeError(f"generated {stats.messages} messages instead of {messages}")
    return {
        "path": str(out),
        "queries_path": str(queries_path),
        "seed": seed,
        "team_id": TEAM_ID,
        "team_domain": TEAM_DOMAIN,
        "messages": stats.messages,
        "threads": stats.threads + len({m.parent for m in all_planted if m.parent}),
        "replies": stats.replies + sum(1 for m in all_planted if m.parent),
        "broadcasts": stats.broadcasts + sum(1 for m in all_planted if m.broadcast),
        "bot_messages": stats.bot_messages,
        "system_messages": stats.system_messages,
        "files": stats.files,
        "edited": stats.edited + sum(1 for m in all_planted if m.edited_after_s),
        "day_files": stats.day_files,
        "users": len(USERS),
        "conversations": {
            "public": kinds["public"],
            "private": kinds["private"],
            "dm": kinds["dm"],
            "group_dm": kinds["group_dm"],
        },
        "messages_per_conversation": stats.per_conversation,
        "first_date": date.fromordinal(719163 + (stats.first_day or 0)).isoformat(),
        "last_date": last.isoformat(),
        "planted_facts": len({fact for q in planted.QUERIES for fact in q.fact_ids}),
        "planted_messages": len(all_planted),
        "queries": len(document["queries"]),
        "zip_bytes": out.stat().st_size,
        **extra,
    }


def _write_yaml(path: Path, document: dict) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(
        yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100),
        encoding="utf-8",
    )
    os.replace(partial, path)
