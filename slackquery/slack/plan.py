"""`sync --plan`: how many Web API requests, and how many minutes, a first full sync takes,
and the least a later run takes.

The workspace's shape (conversations, top-level messages per conversation, replies per
thread, members) is read from the canonical store when it holds one, and scaled to the
number of messages asked about; each pacing preset then gives requests per method and
the minutes they need at its pace. Methods are paced independently and the sync
interleaves them, so a run takes at least the slowest method's minutes and at most their sum.

A later run reads at least the member lists of the private channels and its share of the
public ones, one history page of every conversation, and its share of quiet threads,
whatever changed: that floor does not shrink with the number of messages, and a schedule
shorter than it leaves no run time to finish.
"""

import math
from dataclasses import dataclass
from typing import Any

import duckdb

from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from slackquery.slack.pacing import METHOD_TIERS, PRESETS, Pacing, pacing_from_setting
from slackquery.slack.sync import (
    history_sweep_size,
    public_member_lists_per_run,
    thread_sweep_size,
)

SHAPE_SQL = """
with live as (
    select channel_id, thread_ts, ts, is_thread_reply, is_thread_broadcast
    from messages where not is_deleted
)
select
    (select count(*) from live),
    (select list(n order by channel_id) from (
        select channel_id, count(*) as n from live
        where not is_thread_reply or is_thread_broadcast group by 1)),
    (select list(n order by thread_ts) from (
        select thread_ts, count(*) as n from live where is_thread_reply group by 1)),
    (select count(*) from channels),
    (select list(coalesce(len(member_ids), 0) order by channel_id) from channels),
    (select list(conversation_type order by channel_id) from channels),
    (select count(*) from users)
"""


@dataclass(frozen=True)
class Shape:
    """A workspace as the sync sees it."""

    messages: int
    history_per_channel: list[int]
    replies_per_thread: list[int]
    channels: int
    members_per_channel: list[int]
    types: list[str]  # each channel's conversation type, in the order of members_per_channel
    users: int


def store_shape(settings: Settings) -> Shape:
    """The canonical store's shape (the plan needs a store holding a workspace)."""
    path = settings.canonical_path
    if not path.exists():
        raise SlackqueryError(
            f"{path}: no canonical store to take the workspace's shape from; import an export "
            "or run `slackquery sample` and import it first"
        )
    with duckdb.connect(str(path), read_only=True) as connection:
        row = connection.execute(SHAPE_SQL).fetchone()
    assert row is not None
    if not row[0]:
        raise SlackqueryError(f"{path}: the canonical store holds no messages")
    messages, history, replies, channels, members, types, users = row
    return Shape(
        messages,
        list(history or []),
        list(replies or []),
        channels,
        list(members or []),
        list(types or []),
        users,
    )


def _directory_requests(shape: Shape, list_page: int, member_requests: int) -> dict[str, int]:
    """What a run reads first: identity, users, conversations and member lists."""
    return {
        "auth.test": 1,
        "team.info": 1,
        "users.list": math.ceil(shape.users / list_page),
        "conversations.list": math.ceil(shape.channels / list_page),
        "conversations.members": member_requests,
    }


def _member_list_pages(shape: Shape, list_page: int, kinds: set[str] | None = None) -> int:
    """Requests to read the member lists of the conversations of `kinds` (None: all)."""
    return sum(
        max(1, math.ceil(count / list_page))
        for count, kind in zip(shape.members_per_channel, shape.types, strict=True)
        if kinds is None or kind in kinds
    )


def requests_for(shape: Shape, messages: int, page: dict[str, int]) -> dict[str, int]:
    """Requests per method of a first full sync of `shape` scaled to `messages`."""
    scale = messages / shape.messages
    per_channel = [count * scale for count in shape.history_per_channel]
    history_page, replies_page, list_page = (
        page["conversations.history"],
        page["conversations.replies"],
        page["users.list"],
    )
    channels_without_messages = max(0, shape.channels - len(per_channel))
    return {
        **_directory_requests(shape, list_page, _member_list_pages(shape, list_page)),
        "conversations.history": sum(
            max(1, math.ceil(count / history_page)) for count in per_channel
        )
        + channels_without_messages,
        "conversations.replies": round(
            scale
            * sum(math.ceil((replies + 1) / replies_page) for replies in shape.replies_per_thread)
        ),
    }


def later_run_requests(
    shape: Shape, page: dict[str, int], thread_sweep: int, history_sweep: int, public_members: int
) -> dict[str, int]:
    """The fewest requests per method of a sync run after the first: the directory (member
    lists of private channels, and of `public_members` public ones), one history page per
    conversation and per conversation whose older history it sweeps, and the quiet threads
    it sweeps (new messages and threads active in the re-read window add to these)."""
    list_page = page["users.list"]
    private = _member_list_pages(shape, list_page, {"private_channel"})
    return {
        **_directory_requests(shape, list_page, private + public_members),
        "conversations.history": shape.channels + history_sweep,
        "conversations.replies": thread_sweep,
    }


def _minutes(requests: dict[str, int], pacing: Pacing) -> dict[str, float]:
    return {method: count * pacing.interval(method) / 60 for method, count in requests.items()}


def plan(settings: Settings, messages: int) -> dict[str, Any]:
    """Per pacing preset: requests per method and the minutes they need, for a first full
    sync and at least for each later run."""
    shape = store_shape(settings)
    threads = round(len(shape.replies_per_thread) * messages / shape.messages)
    presets = []
    for name in PRESETS:
        pacing = pacing_from_setting(name)
        page = {
            method: pacing.page_size(method, settings.slack_page_size) for method in METHOD_TIERS
        }
        requests = requests_for(shape, messages, page)
        minutes = _minutes(requests, pacing)
        sweep = min(thread_sweep_size(settings, pacing), threads)
        public = public_member_lists_per_run(shape.types.count("public_channel"), pacing)
        history_sweep = min(history_sweep_size(settings, pacing), shape.channels)
        later = later_run_requests(shape, page, sweep, history_sweep, public)
        presets.append(
            {
                "preset": pacing.name,
                "history_page_size": page["conversations.history"],
                "requests": requests,
                "request_count": sum(requests.values()),
                "minutes_at_least": round(max(minutes.values()), 1),
                "minutes_at_most": round(sum(minutes.values()), 1),
                "later_run": {
                    "requests": later,
                    "request_count": sum(later.values()),
                    "minutes_at_least": round(max(_minutes(later, pacing).values()), 1),
                },
            }
        )
    return {
        "messages": messages,
        "shape": {
            "from_store_messages": shape.messages,
            "conversations": shape.channels,
            "threads": threads,
            "users": shape.users,
        },
        "presets": presets,
    }
