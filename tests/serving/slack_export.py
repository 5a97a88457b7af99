"""The serving test corpus, written as two real Slack export folders (one per workspace).

The corpus exercises retrieval edge cases: identifiers that the FTS config splits
(`ERR-42`, `v2.3.1`), whole ids (`28P01`, `U024BE7LH`), accents, Cyrillic and CJK text,
emoji, a mrkdwn link, an attached file, threads (one long enough for the per-thread cap),
two workspaces that both have an `#eng`, a DM, an SQL injection string, and a message
longer than the response cap. A private channel (with a thread), the DM and a group DM
each hold a word found nowhere else (`RESTRICTED_WORDS`), for the visibility tests: Chen
Wei (U3) is a member of none of them, Bob Smith (U2) of all three. Message `n` is posted
`n` hours after BASE_TS with ts `<seconds>.<n:06d>`, so its document id is
`<team>:<channel>:<ts>` (see `message_id`).
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BASE_TS = 1_709_280_000  # 2024-03-01T08:00:00Z
ACME = "T0ACME"
BETA = "T0BETA"
LONG_TEXT = "Postmortem notes. " + "The replica lagged and the queue grew again. " * 150

# user id -> (handle, real name, display name); Chen Wei has no display name, so the
# projection falls back to the real name.
PEOPLE = {
    "U1": ("priya.patel", "Priya Patel", "Priya Patel"),
    "U2": ("bob.smith", "Bob Smith", "Bob Smith"),
    "U3": ("chen.wei", "Chen Wei", ""),
    "U4": ("zoe.muller", "Zoë Müller", "Zoë Müller"),
}
# channel id -> (workspace, export folder, conversation list, name)
CHANNELS = {
    "C1": (ACME, "eng", "channels.json", "eng"),
    "C2": (ACME, "support", "channels.json", "support"),
    "C3": (ACME, "random", "channels.json", "random"),
    "D1": (ACME, "D1", "dms.json", None),
    "G1": (ACME, "secret-plans", "groups.json", "secret-plans"),
    "M1": (ACME, "mpdm-priya.patel--bob.smith--zoe.muller-1", "mpims.json", None),
    "C9": (BETA, "eng", "channels.json", "eng"),
}
# Members of the conversations that are not open to the whole workspace.
RESTRICTED_MEMBERS = {"D1": ["U1", "U2"], "G1": ["U1", "U2"], "M1": ["U1", "U2", "U4"]}
# channel -> the word only that conversation's messages contain.
RESTRICTED_WORDS = {"G1": "narwhal", "D1": "quokka", "M1": "axolotl"}
# The second Acme export: Chen Wei has joined the private channel since.
SECOND_MEMBERS = {**RESTRICTED_MEMBERS, "G1": ["U1", "U2", "U3"]}
WORKSPACES = {
    ACME: {"slug": "acme", "name": "Acme Corp", "people": ["U1", "U2", "U3", "U4"]},
    BETA: {"slug": "beta", "name": "Beta Labs", "people": ["U2", "U3"]},
}


@dataclass(frozen=True)
class Message:
    """One message; `thread` is the index of its thread's root message, if any."""

    index: int
    channel: str
    user: str
    text: str
    thread: int | None = None

    @property
    def workspace(self) -> str:
        return CHANNELS[self.channel][0]


def ts(index: int) -> str:
    """The Slack ts of message `index`."""
    return f"{BASE_TS + index * 3600}.{index:06d}"


def message_id(index: int, channel: str = "C1", team: str = ACME) -> str:
    """The document id the pipeline gives message `index`."""
    return f"{team}:{channel}:{ts(index)}"


def corpus() -> list[Message]:
    """Forty messages over two workspaces."""
    m = Message
    return [
        m(0, "C1", "U1", "Deploy of v2.3.1 failed with ERR-42 on the payments service", 0),
        m(1, "C1", "U2", "ERR-42 again, looks like the connection pool is exhausted", 0),
        m(2, "C1", "U3", "I rolled back to v2.3.0, errors stopped", 0),
        m(3, "C1", "U1", "Root cause: max_connections too low after the config change", 0),
        m(4, "C1", "U4", "Thanks Priya, closing the incident", 0),
        m(5, "C2", "U2", "Customer reports postgres error 28P01 password authentication failed"),
        m(6, "C2", "U1", "28P01 means invalid password; rotate the credentials in vault"),
        m(7, "C3", "U3", "Lunch anyone? The new ramen place opened 🍜"),
        m(8, "C3", "U4", "Café meeting at 3pm, résumé review afterwards"),
        m(9, "C1", "U3", "Привет команда, база данных работает медленно"),
        m(10, "C1", "U3", "数据库 连接 超时 问题"),
        m(11, "C2", "U2", "Docs are at <https://docs.acme.dev/runbooks/db-failover> please read"),
        m(12, "C1", "U1", "How do we rotate TLS certificates before they expire?"),
        m(13, "C1", "U2", "cert-manager renews certificates automatically every 60 days"),
        m(14, "D1", "U1", "Can you review my PR for the billing migration?"),
        m(15, "D1", "U2", "Sure, will look at the billing migration PR today"),
        m(16, "C3", "U4", "🎉🎉🎉"),
        m(17, "C1", "U4", "The staging cluster is out of disk space again", 17),
        m(18, "C1", "U2", "Cleaned old docker images on staging, 40% free now", 17),
        m(19, "C2", "U3", "Exact phrase test: the quick brown fox jumps"),
        m(20, "C2", "U3", "brown quick fox the jumps: order differs here"),
        m(21, "C1", "U1", LONG_TEXT),
        m(22, "C9", "U2", "Beta team eng channel: ERR-42 seen in beta too"),
        m(23, "C9", "U3", "Beta deploy pipeline is green"),
        m(24, "C1", "U2", "Memory leak in the worker after upgrading to v2.4.0"),
        m(25, "C1", "U3", "Heap grows slowly, the garbage collector cannot free the cache"),
        m(26, "C2", "U4", "User U024BE7LH cannot log in since yesterday"),
        m(27, "C3", "U1", "Weekend hiking trip photos are in the shared drive"),
        m(28, "C1", "U2", "Kafka consumer lag spiked during the nightly batch job"),
        m(29, "C1", "U4", "We should add alerting on consumer lag above 10k messages"),
        m(30, "C2", "U1", "Refund requests are piling up, finance needs a report"),
        m(31, "C1", "U1", "Database failover drill scheduled for Friday"),
        m(32, "C1", "U3", "x'); DROP TABLE search_documents; -- is a classic injection string"),
        m(33, "C3", "U2", "Coffee machine on floor 3 is broken again ☕"),
        m(34, "C1", "U4", "Rate limiter returns 429 too often for the mobile app"),
        m(35, "C1", "U2", "Increase the token bucket size for the mobile client"),
        m(41, "G1", "U1", "Private roadmap: project narwhal ships in May", 41),
        m(42, "G1", "U2", "The launch checklist for that project is ready", 41),
        m(43, "D1", "U2", "The quokka budget numbers are attached"),
        m(44, "M1", "U4", "Planning the axolotl offsite for the three of us"),
    ]


# message index -> the files attached to it, as an export lists them.
FILES = {
    27: [
        {
            "id": "F0TRAIL",
            "name": "trail-map.pdf",
            "title": "Ridge trail map",
            "mimetype": "application/pdf",
            "size": 2048,
        }
    ]
}

# Only in the second export of Acme: the message the second artifact adds.
ZEBRA = Message(40, "C1", "U1", "Fresh news only in artifact b: zebra migration done")


def _message_json(
    message: Message, replies: dict[int, list[Message]], authors: dict[int, str]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "message",
        "user": message.user,
        "text": message.text,
        "ts": ts(message.index),
        "team": message.workspace,
    }
    if message.index in FILES:
        body["files"] = FILES[message.index]
    if message.thread is None:
        return body
    body["thread_ts"] = ts(message.thread)
    if message.thread == message.index:
        members = replies.get(message.index, [])
        body["reply_count"] = len(members)
        body["reply_users"] = sorted({reply.user for reply in members})
        body["latest_reply"] = ts(members[-1].index) if members else None
    else:
        body["parent_user_id"] = authors[message.thread]
    return body


def export_members(
    team: str, messages: list[Message], restricted: dict[str, list[str]] = RESTRICTED_MEMBERS
) -> dict[str, Any]:
    """Member path -> JSON value of one workspace's "all conversations" export;
    `restricted` gives the members of the private channel, DM and group DM."""
    workspace = WORKSPACES[team]
    users = []
    for user_id in workspace["people"]:
        handle, real_name, display_name = PEOPLE[user_id]
        users.append(
            {
                "id": user_id,
                "team_id": team,
                "name": handle,
                "real_name": real_name,
                "profile": {"display_name": display_name, "real_name": real_name, "team": team},
            }
        )
    ours = [message for message in messages if message.workspace == team]
    authors = {message.index: message.user for message in ours}
    replies: dict[int, list[Message]] = {}
    for message in ours:
        if message.thread is not None and message.thread != message.index:
            replies.setdefault(message.thread, []).append(message)
    lists: dict[str, list[dict[str, Any]]] = {}
    members: dict[str, Any] = {"users.json": users}
    for channel_id, (owner, folder, list_name, name) in CHANNELS.items():
        if owner != team:
            continue
        entry: dict[str, Any] = {"id": channel_id, "created": BASE_TS - 86_400}
        members_of = restricted.get(channel_id, workspace["people"])
        if list_name == "mpims.json":
            entry.update(name=folder, creator="U1", members=members_of)
        elif name is None:
            entry["members"] = members_of
        else:
            entry.update(name=name, creator="U1", members=members_of)
        lists.setdefault(list_name, []).append(entry)
        days: dict[str, list[dict[str, Any]]] = {}
        for message in ours:
            if message.channel == channel_id:
                day = datetime.fromtimestamp(BASE_TS + message.index * 3600, UTC).date()
                days.setdefault(f"{folder}/{day.isoformat()}.json", []).append(
                    _message_json(message, replies, authors)
                )
        members.update(days)
    members.update(lists)
    return members


def write_export(
    folder: Path,
    team: str,
    messages: list[Message],
    restricted: dict[str, list[str]] = RESTRICTED_MEMBERS,
) -> Path:
    """Write one workspace's export folder and return it."""
    for name, value in export_members(team, messages, restricted).items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(value, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder
