"""A small but faithful Slack Web API for tests, serving a workspace read from an export.

It answers the methods `sync` calls the way Slack documents them: bearer-token auth,
`ok`/`error` bodies, cursor paging (`has_more`, `response_metadata.next_cursor`),
history newest first within exclusive `oldest`/`latest` bounds holding top-level messages
and broadcasts, replies oldest first with the parent on the first page. Tests change the
workspace between runs (edit, delete, reply, membership, rename, archive) and inject
faults (429 + Retry-After, 500, a slow response, any `ok: false` error, a page that
changes between two requests, a page of the test's own making). Every request is logged
with the shared clock's reading, so pacing is checked against the same (fake) clock the
client waits on.
"""

import asyncio
import base64
import copy
import json
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from slackquery.canonical.rows import ts_to_us

TOKEN = "xoxb-test-token"
LISTS = {
    "channels.json": {"is_channel": True, "is_private": False},
    "groups.json": {"is_group": True, "is_private": True},
    "dms.json": {"is_im": True, "is_private": True},
    "mpims.json": {"is_mpim": True, "is_private": True, "is_group": True},
}
TYPE_OF_LIST = {
    "channels.json": "public_channel",
    "groups.json": "private_channel",
    "dms.json": "im",
    "mpims.json": "mpim",
}


@dataclass
class Fault:
    """Answer the next `times` matching requests with `kind` instead of the real page.

    `kind`: 429 | 500 | slow | changed | missing_scope | body (the JSON `body`, as given) |
    raw (the string `body` as it is, a 200 that need not be JSON) |
    any other string: `{"ok": false, "error": kind}` (with `ratelimited`, a Retry-After).
    A request matches by method, and by `channel` and `thread` (its `ts`) when they are set;
    the first `after` matching requests are answered as usual.
    """

    method: str
    kind: str
    times: int = 1
    channel: str | None = None
    thread: str | None = None
    after: int = 0
    retry_after: int | str = 7
    delay_s: float = 2.0
    change: Callable[[], None] | None = None  # for `changed`: what changes meanwhile
    body: Any = None  # for `body`


@dataclass
class Logged:
    """One request as the server saw it."""

    at: float
    method: str
    params: dict[str, str]
    status: int = 200

    def page_key(self) -> tuple[str, ...]:
        """What identifies the page asked for (method, channel, thread, bounds, cursor)."""
        keys = ("channel", "ts", "oldest", "latest", "cursor")
        return (self.method, *(self.params.get(key, "") for key in keys))


@dataclass
class FakeSlack:
    """The workspace and the request log; `app` serves them."""

    team_id: str
    team_domain: str
    team_name: str
    users: list[dict[str, Any]]
    conversations: dict[str, dict[str, Any]]  # id -> API conversation object
    members: dict[str, list[str]]
    messages: dict[str, dict[str, dict[str, Any]]]  # channel -> ts -> message
    clock: Any
    token: str = TOKEN
    not_member: set[str] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)
    log: list[Logged] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_export(cls, path: Path, clock: Any, *, team_name: str, domain: str) -> "FakeSlack":
        """Load an export ZIP (the sample generator's) as the live workspace."""
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            users = orjson.loads(archive.read("users.json"))
            conversations: dict[str, dict[str, Any]] = {}
            members: dict[str, list[str]] = {}
            folders: dict[str, str] = {}
            for list_name, flags in LISTS.items():
                if list_name not in names:
                    continue
                for entry in orjson.loads(archive.read(list_name)):
                    entry = dict(entry)
                    members[entry["id"]] = list(entry.pop("members", []))
                    if TYPE_OF_LIST[list_name] == "im":
                        others = [m for m in members[entry["id"]] if m != members[entry["id"]][0]]
                        entry["user"] = others[0] if others else members[entry["id"]][0]
                    conversations[entry["id"]] = {**entry, **flags}
                    folder = entry["id"] if list_name == "dms.json" else entry.get("name")
                    folders[str(folder)] = entry["id"]
            messages: dict[str, dict[str, dict[str, Any]]] = {cid: {} for cid in conversations}
            for name in sorted(names):
                parts = name.split("/")
                if len(parts) == 2 and parts[1].endswith(".json") and parts[0] in folders:
                    for message in orjson.loads(archive.read(name)):
                        messages[folders[parts[0]]][message["ts"]] = message
        team_id = next(user["team_id"] for user in users if user.get("team_id"))
        return cls(team_id, domain, team_name, users, conversations, members, messages, clock)

    # --- changes a test makes between runs --------------------------------------------

    def edit(self, channel: str, ts: str, text: str, edited_ts: str) -> None:
        """Edit a message as Slack does: new text and an `edited` stamp."""
        message = self.messages[channel][ts]
        message["text"] = text
        message["edited"] = {"user": message.get("user"), "ts": edited_ts}

    def delete(self, channel: str, ts: str) -> None:
        """Delete a message (a parent with replies stays behind as a `tombstone`)."""
        message = self.messages[channel][ts]
        if message.get("reply_count"):
            self.messages[channel][ts] = {
                "type": "message",
                "subtype": "tombstone",
                "text": "This message was deleted.",
                "user": "USLACKBOT",
                "hidden": True,
                "ts": ts,
                "thread_ts": ts,
                "reply_count": message["reply_count"],
                "latest_reply": message.get("latest_reply"),
            }
        else:
            del self.messages[channel][ts]

    def reply(self, channel: str, thread_ts: str, ts: str, user: str, text: str) -> None:
        """Post a reply; the parent's reply_count and latest_reply move as in Slack."""
        parent = self.messages[channel][thread_ts]
        self.messages[channel][ts] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "thread_ts": thread_ts,
            "parent_user_id": parent.get("user"),
        }
        parent["thread_ts"] = thread_ts
        parent["reply_count"] = int(parent.get("reply_count") or 0) + 1
        parent["latest_reply"] = ts

    def post(self, channel: str, ts: str, user: str, text: str) -> None:
        """Post a top-level message."""
        self.messages[channel][ts] = {"type": "message", "user": user, "text": text, "ts": ts}

    def requested(self, method: str, param: str, since: int = 0) -> list[str]:
        """`param` of each `method` request logged from the `since`-th request on, in order."""
        return [entry.params[param] for entry in self.log[since:] if entry.method == method]

    # --- the Web API -------------------------------------------------------------------

    @property
    def app(self) -> Starlette:
        """The ASGI app: `/api/<method>` for GET query strings and form-encoded POSTs."""
        return Starlette(routes=[Route("/api/{method}", self._handle, methods=["GET", "POST"])])

    async def _handle(self, request: Request) -> Response:
        method = request.path_params["method"]
        params = dict(request.query_params)
        if request.method == "POST":
            params.update({key: str(value) for key, value in (await request.form()).items()})
        entry = Logged(self.clock.monotonic(), method, params)
        with self.lock:
            self.log.append(entry)
            fault = self._take_fault(method, params)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        if fault is not None:
            response = await self._fault_response(fault)
            if response is not None:
                entry.status = response.status_code
                return response
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return JSONResponse({"ok": False, "error": "unknown_method"})
        with self.lock:
            body = handler(params)
        return JSONResponse(body)

    def _take_fault(self, method: str, params: dict[str, str]) -> Fault | None:
        for fault in self.faults:
            if (
                fault.method == method
                and fault.channel in (None, params.get("channel"))
                and fault.thread in (None, params.get("ts"))
            ):
                if fault.after > 0:
                    fault.after -= 1
                    return None
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    async def _fault_response(self, fault: Fault) -> Response | None:
        if fault.kind == "429":
            return JSONResponse(
                {"ok": False, "error": "ratelimited"},
                status_code=429,
                headers={"Retry-After": str(fault.retry_after)},
            )
        if fault.kind == "500":
            return Response("upstream broke", status_code=500)
        if fault.kind == "slow":
            await asyncio.sleep(fault.delay_s)  # longer than the client's timeout
            return Response("too late", status_code=504)
        if fault.kind == "changed":
            # The workspace changes while this request is being answered and the answer is
            # lost (a 500): the client's repeat of the same request sees a different page.
            assert fault.change is not None
            with self.lock:
                fault.change()
            return Response("changed under me", status_code=500)
        if fault.kind == "raw":
            return Response(fault.body, media_type="text/html")
        if fault.kind == "body":
            # json.dumps escapes what JSONResponse cannot encode (a lone surrogate).
            return Response(json.dumps(fault.body), media_type="application/json")
        if fault.kind == "ratelimited":
            return JSONResponse(
                {"ok": False, "error": "ratelimited"},
                headers={"Retry-After": str(fault.retry_after)},
            )
        if fault.kind == "missing_scope":
            return JSONResponse(
                {
                    "ok": False,
                    "error": "missing_scope",
                    "needed": "channels:history",
                    "provided": "channels:read,users:read",
                }
            )
        return JSONResponse({"ok": False, "error": fault.kind})

    def _auth_test(self, params: dict[str, str]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{self.team_domain}.slack.com/",
            "team": self.team_name,
            "team_id": self.team_id,
            "user_id": "UBOTSYNC",
            "bot_id": "BBOTSYNC",
        }

    def _team_info(self, params: dict[str, str]) -> dict[str, Any]:
        return {
            "ok": True,
            "team": {"id": self.team_id, "name": self.team_name, "domain": self.team_domain},
        }

    def _users_list(self, params: dict[str, str]) -> dict[str, Any]:
        page, cursor = _offset_page(self.users, params)
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_list(self, params: dict[str, str]) -> dict[str, Any]:
        types = set(params.get("types", "public_channel").split(","))
        wanted = [
            copy.deepcopy(conversation)
            for conversation in self.conversations.values()
            if _type_of(conversation) in types
        ]
        page, cursor = _offset_page(wanted, params)
        return {"ok": True, "channels": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_members(self, params: dict[str, str]) -> dict[str, Any]:
        channel = params.get("channel", "")
        if channel not in self.conversations:
            return {"ok": False, "error": "channel_not_found"}
        page, cursor = _offset_page(self.members[channel], params)
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    def _conversations_history(self, params: dict[str, str]) -> dict[str, Any]:
        channel = params.get("channel", "")
        if channel not in self.conversations:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_member:
            return {"ok": False, "error": "not_in_channel"}
        oldest = ts_to_us(params.get("oldest") or "0")
        latest = ts_to_us(params["latest"]) if params.get("latest") else 2**63
        before = _cursor_ts(params.get("cursor"))
        top_level = sorted(
            (
                message
                for ts, message in self.messages[channel].items()
                if oldest < ts_to_us(ts) < min(latest, before)
                and (
                    message.get("thread_ts") in (None, ts)
                    or message.get("subtype") == "thread_broadcast"
                )
            ),
            key=lambda message: ts_to_us(message["ts"]),
            reverse=True,
        )
        limit = int(params.get("limit") or 100)
        page = [copy.deepcopy(message) for message in top_level[:limit]]
        has_more = len(top_level) > limit
        return {
            "ok": True,
            "messages": page,
            "has_more": has_more,
            "response_metadata": {
                "next_cursor": _encode("next_ts", page[-1]["ts"]) if has_more else ""
            },
        }

    def _conversations_replies(self, params: dict[str, str]) -> dict[str, Any]:
        channel = params.get("channel", "")
        thread_ts = params.get("ts", "")
        if channel not in self.conversations:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_member:
            return {"ok": False, "error": "not_in_channel"}
        if thread_ts not in self.messages[channel]:
            return {"ok": False, "error": "thread_not_found"}
        thread = sorted(
            (
                message
                for ts, message in self.messages[channel].items()
                if message.get("thread_ts") == thread_ts and ts != thread_ts
            ),
            key=lambda message: ts_to_us(message["ts"]),
        )
        after = _cursor_ts(params.get("cursor"), default=-1)
        remaining = [message for message in thread if ts_to_us(message["ts"]) > after]
        limit = int(params.get("limit") or 100)
        page = remaining[:limit]
        if after < 0:
            page = [self.messages[channel][thread_ts], *page]
        has_more = len(remaining) > limit
        return {
            "ok": True,
            "messages": [copy.deepcopy(message) for message in page],
            "has_more": has_more,
            "response_metadata": {
                "next_cursor": _encode("after_ts", page[-1]["ts"]) if has_more else ""
            },
        }


def _type_of(conversation: dict[str, Any]) -> str:
    if conversation.get("is_im"):
        return "im"
    if conversation.get("is_mpim"):
        return "mpim"
    return "private_channel" if conversation.get("is_private") else "public_channel"


def _encode(kind: str, value: str) -> str:
    return base64.b64encode(f"{kind}:{value}".encode()).decode()


def _cursor_ts(cursor: str | None, default: int = 2**63) -> int:
    """The ts boundary a history/replies cursor carries (Slack's are `next_ts:<ts>` too)."""
    if not cursor:
        return default
    return ts_to_us(base64.b64decode(cursor).decode().split(":", 1)[1])


def _offset_page(items: list[Any], params: dict[str, str]) -> tuple[list[Any], str]:
    """A page of a list method: cursor = base64 of the next offset."""
    cursor = params.get("cursor")
    start = int(base64.b64decode(cursor).decode().split(":")[1]) if cursor else 0
    limit = int(params.get("limit") or 100)
    end = start + limit
    following = _encode("offset", str(end)) if end < len(items) else ""
    return copy.deepcopy(items[start:end]), following


def main() -> None:
    """`python -m tests.slack.server EXPORT.zip PORT`: serve an export until killed."""
    import sys

    import uvicorn

    from slackquery.sample.workspace import TEAM_DOMAIN, TEAM_NAME
    from slackquery.slack.pacing import SystemClock

    slack = FakeSlack.from_export(
        Path(sys.argv[1]), SystemClock(), team_name=TEAM_NAME, domain=TEAM_DOMAIN
    )
    uvicorn.run(slack.app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")


if __name__ == "__main__":
    main()
