"""Who wrote the messages: the listed users plus the authors a user list does not name.

Slackbot, bots that post without a user id (named from their bot profile) and users
missing from the list (kept, named from the message's `user_profile` when it has one,
and warned about once) all become users rows, for exports and the Web API alike.
"""

from typing import Any

from slackquery.canonical.rows import UserRow, slack_user_row
from slackquery.canonical.staging import Warnings

_SLACKBOT = {"id": "USLACKBOT", "name": "slackbot", "real_name": "Slackbot", "is_bot": True}


class Authors:
    """The export's users plus authors it does not list: Slackbot, bots, unknown users."""

    def __init__(self, users: dict[str, dict[str, Any]], warnings: Warnings) -> None:
        self.users = users
        self.warnings = warnings
        self.known = set(users)
        self.bot_user_ids = {uid for uid, user in users.items() if user.get("is_bot")}
        self.extra: dict[str, dict[str, Any]] = {}
        self.unknown: dict[str, list[Any]] = {}  # id -> [first file, message count]
        self._written: set[str] = set()

    def note(self, message: dict[str, Any], where: str) -> None:
        """Account for the message's author (user or bot) if the export does not list it."""
        user = message.get("user")
        if isinstance(user, str) and user not in self.known:
            self._note_unknown_user(user, message, where)
        bot_id = message.get("bot_id")
        if (
            isinstance(bot_id, str)
            and not isinstance(user, str)
            and bot_id not in self.known
            and bot_id not in self.extra
        ):
            self.extra[bot_id] = _bot_user(bot_id, message)

    def _note_unknown_user(self, user: str, message: dict[str, Any], where: str) -> None:
        """Slackbot is added silently; other unknown authors are kept and warned about once."""
        if user == "USLACKBOT":
            self.extra[user] = dict(_SLACKBOT)
            self.known.add(user)
            return
        if user in self.unknown:
            self.unknown[user][1] += 1
            return
        self.unknown[user] = [where, 1]
        profile = message.get("user_profile")
        if isinstance(profile, dict):
            self.extra[user] = {
                "id": user,
                "name": profile.get("name"),
                "real_name": profile.get("real_name"),
                "profile": profile,
            }

    def warn_unknown(self) -> None:
        """One warning per unknown author, naming the first file it appeared in."""
        for user_id, (first_file, count) in sorted(self.unknown.items()):
            source = "named from the message's user_profile" if user_id in self.extra else ""
            self.warnings.add(
                first_file,
                f"unknown user {user_id} (not in users.json), {count} message(s) kept"
                + (f"; {source}" if source else ""),
            )

    def rows(self, workspace_id: str) -> list[UserRow]:
        """Users rows: listed users first, then the authors found in messages."""
        entries = [*self.users.values(), *self.extra.values()]
        return [slack_user_row(workspace_id, entry) for entry in entries]

    def new_rows(self, workspace_id: str) -> list[UserRow]:
        """Users rows of the authors found since the last call (a sync writes them per page)."""
        fresh = [entry for key, entry in self.extra.items() if key not in self._written]
        self._written.update(self.extra)
        return [slack_user_row(workspace_id, entry) for entry in fresh]


def _bot_user(bot_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """A users row for a bot that posts without a user id, named from its bot profile."""
    profile = message.get("bot_profile")
    name = profile.get("name") if isinstance(profile, dict) else None
    name = name or message.get("username") or bot_id
    return {"id": bot_id, "name": name, "real_name": name, "is_bot": True, "bot_profile": profile}
