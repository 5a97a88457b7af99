"""Slack export loader: the standard ZIP/folder layout and slackdump's (local file copies).

Both layouts are `users.json`, the conversation lists and `<folder>/YYYY-MM-DD.json` day
files; slackdump adds `__uploads/<file id>/<name>` or `<folder>/attachments/<id>-<name>`
copies, which make the run's source format `slackdump_export`. The lists are read and
checked before the transaction starts (`__init__`); `stage` then streams the day files.
"""

import re
import unicodedata
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import duckdb

from slackquery.canonical.authors import Authors
from slackquery.canonical.rows import is_slack_id, slack_channel_row
from slackquery.canonical.sources import CONVERSATION_LISTS, DAY_FILE, USER_LISTS, ExportReader
from slackquery.canonical.staging import CopyEvidence, Staged, Staging, Warnings
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

CONVERSATION_TYPES = {
    "channels.json": "public_channel",
    "groups.json": "private_channel",
    "dms.json": "im",
    "mpims.json": "mpim",
}


class SlackExportLoader:
    """Stages a Slack export (standard or slackdump layout)."""

    def __init__(self, settings: Settings, path: Path, slug_hint: str, warnings: Warnings) -> None:
        self.settings = settings
        self.warnings = warnings
        self.reader = ExportReader(path, settings.import_max_file_bytes)
        try:
            self._plan(slug_hint)
        except BaseException:
            self.reader.close()
            raise

    def _plan(self, slug_hint: str) -> None:
        """Read the lists and index the members; all checks that need no database."""
        reader = self.reader
        members = set(reader.members)
        user_list = next((name for name in USER_LISTS if name in members), None)
        if user_list is None:
            raise SlackqueryError(
                f"{reader.path.name}: missing users.json (or org_users.json) in the export"
            )
        if not any(name in members for name in CONVERSATION_LISTS):
            raise SlackqueryError(
                f"{reader.path.name}: no conversation list in the export (expected "
                "channels.json, groups.json, dms.json or mpims.json)"
            )
        self.users = self._load_users(user_list)
        teams = Counter(
            team
            for user in self.users.values()
            for team in (user.get("team_id"), _profile_team(user))
            if isinstance(team, str) and team
        )
        # Without a team id the workspace is named by the file; unique channel ids tell a copy.
        self.copy_evidence: CopyEvidence | None = None if teams else "channels"
        self.workspace_id = teams.most_common(1)[0][0] if teams else slug_hint
        self.has_team_id = bool(teams)
        self.conversations: dict[str, dict[str, Any]] = {}  # channel_id -> entry
        self.folders: dict[str, str] = {}  # folder name (NFC) -> channel_id
        self.refused_folders: set[str] = set()  # of conversations skipped for their id
        for list_name in CONVERSATION_LISTS:
            if list_name in members:
                self._load_conversations(list_name, CONVERSATION_TYPES[list_name])
        self._index_members()
        self.source_format = "slackdump_export" if self.local_paths else "slack_export"
        stem = reader.path.name if reader.path.is_dir() else reader.path.stem
        match = re.match(r"^(.*?)\s+slack\s+export", stem, re.IGNORECASE)
        self.team_name_hint = match.group(1).strip() if match else None

    def _index_members(self) -> None:
        """Find the day files of listed conversations and slackdump's local file copies.

        A day file is `<folder>/YYYY-MM-DD.json`, its folder matched to a listed
        conversation after NFC normalisation (macOS tools write names decomposed). The
        folder may hold a `/` (a name with one). Every other day file is warned about, those
        of a conversation skipped for its id by the warning that skipped it.
        """
        reader = self.reader
        self.day_files: list[tuple[str, str, str]] = []  # (channel_id, member, day)
        self.local_paths: dict[str, str] = {}
        unknown_folders: Counter[str] = Counter()
        for name, problem in reader.problems:
            self.warnings.add(f"{reader.path.name}:{name}", problem)
        for member in reader.members:
            parts = member.split("/")
            if len(parts) == 3 and parts[0] == "__uploads":
                self.local_paths.setdefault(parts[1], member)
                continue
            if len(parts) == 3 and parts[1] == "attachments" and "-" in parts[2]:
                self.local_paths.setdefault(parts[2].split("-", 1)[0], member)
                continue
            match = DAY_FILE.match(parts[-1])
            if match is None:
                self._warn_backslash(member)
                continue
            folder = "/".join(parts[:-1])
            try:
                date.fromisoformat(match.group(1))
            except ValueError:
                self.warnings.add(reader.describe(member), "not a valid date: day file skipped")
                continue
            channel_id = self.folders.get(_folder_key(folder))
            if channel_id is None:
                if _folder_key(folder) not in self.refused_folders:
                    unknown_folders[folder] += 1
                continue
            self.day_files.append((channel_id, member, match.group(1)))
        for folder, count in sorted(unknown_folders.items()):
            where = reader.describe(folder + "/" if folder else "")
            if not folder:
                problem = f"{count} day file(s) outside any conversation folder: skipped"
            else:
                problem = (
                    f"unknown conversation {folder!r} (not in any conversation list): "
                    f"{count} day file(s) skipped"
                )
            self.warnings.add(where, problem)
        for name, count in sorted(reader.outside.items()):
            self.warnings.add(
                f"{reader.path.name}:{name}",
                f"outside the export folder {reader.root!r}: {count} file(s) not read",
            )
        if not self.day_files:
            raise SlackqueryError(
                f"{reader.path.name}: the export has no messages "
                "(no <conversation>/YYYY-MM-DD.json day files of a listed conversation)"
            )
        # Covered: the conversations whose day files the export holds. A listed one without
        # any shows nothing of itself (one quiet in the export's span looks the same as a
        # folder lost or misnamed), so none of its stored messages may be tombstoned.
        self.covered = {channel_id for channel_id, _, _ in self.day_files}
        self._warn_uncovered()

    def _warn_backslash(self, member: str) -> None:
        """Warn about a day file named with `\\` separators (as some Windows tools write
        ZIP entries): the name check reads them as separators, Slack's layout does not."""
        if "\\" in member and DAY_FILE.match(member.replace("\\", "/").rsplit("/", 1)[-1]):
            self.warnings.add(
                self.reader.describe(member),
                "a day file named with backslashes, not `/`: not read (re-create the ZIP "
                "with `/` separators, or import the unpacked folder)",
            )

    def _read_order(self, day_file: tuple[str, str, str]) -> tuple[bool, str, str]:
        """Folder by folder, day by day, and a conversation's listed folder before one named
        by its id: of two copies of a message, the listed folder's is kept and the other is
        the duplicate the warning names."""
        channel_id, member, day = day_file
        folder = member.rpartition("/")[0]
        listed = self.conversations[channel_id]["folder"]
        return (_folder_key(folder) != _folder_key(listed), member.split("/")[0], day)

    def _warn_uncovered(self) -> None:
        """Name the listed conversations that are not covered (one warning per list)."""
        missing: dict[str, list[str]] = {}
        for channel_id, info in self.conversations.items():
            if channel_id not in self.covered:
                missing.setdefault(info["list"], []).append(repr(info["folder"]))
        for list_name, folders in missing.items():
            shown = ", ".join(folders[:5]) + (
                f" and {len(folders) - 5} more" if len(folders) > 5 else ""
            )
            self.warnings.add(
                self.reader.describe(list_name),
                f"{len(folders)} listed conversation(s) have no day files in the export "
                f"(folder {shown}): none of their stored messages is tombstoned",
            )

    def _load_list(self, member: str) -> list[Any]:
        value = self.reader.load_json(member)
        if value is None and member in CONVERSATION_LISTS:
            # Older slackdump exports of DMs only write `null` for the lists they lack.
            self.warnings.add(self.reader.describe(member), "null, read as an empty list")
            return []
        if not isinstance(value, list):
            kind = "null" if value is None else type(value).__name__
            raise SlackqueryError(
                f"{self.reader.describe(member)}: expected a JSON list, got {kind}"
            )
        return value

    def _load_users(self, member: str) -> dict[str, dict[str, Any]]:
        users: dict[str, dict[str, Any]] = {}
        for entry in self._load_list(member):
            user_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(user_id, str):
                self.warnings.add(self.reader.describe(member), "user entry without an id skipped")
            elif user_id in users:
                self.warnings.add(self.reader.describe(member), f"duplicate user {user_id} skipped")
            else:
                users[user_id] = entry
        return users

    def _load_conversations(self, member: str, conversation_type: str) -> None:
        for entry in self._load_list(member):
            channel_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(channel_id, str):
                self.warnings.add(
                    self.reader.describe(member), "conversation entry without an id skipped"
                )
                continue
            if channel_id in self.conversations:
                self.warnings.add(
                    self.reader.describe(member), f"duplicate conversation {channel_id} skipped"
                )
                continue
            name = entry.get("name")
            folder = channel_id if conversation_type == "im" or not name else str(name)
            if not is_slack_id(channel_id):
                self._refuse(member, channel_id, folder)
                continue
            self.conversations[channel_id] = {
                "entry": entry,
                "type": conversation_type,
                "folder": folder,
                "list": member,
            }
            owner = self.folders.setdefault(_folder_key(folder), channel_id)
            if owner != channel_id:
                self.warnings.add(
                    self.reader.describe(member),
                    f"conversation {channel_id} has the folder name {folder!r} of {owner}: "
                    f"the folder's day files are read as {owner}'s",
                )
            listed = entry.get("members")
            if listed is not None and not (
                isinstance(listed, list) and all(isinstance(user, str) for user in listed)
            ):
                self.warnings.add(
                    self.reader.describe(member),
                    f"conversation {channel_id}: members is not a list of user ids "
                    "(only the ids in it are kept)",
                )
        for channel_id in self.conversations:
            self.folders.setdefault(channel_id, channel_id)

    def _refuse(self, member: str, channel_id: str, folder: str) -> None:
        """Skip a conversation whose id is no Slack id, with its day files (one warning)."""
        self.refused_folders.add(_folder_key(folder))
        self.warnings.add(
            self.reader.describe(member),
            f"conversation id {channel_id!r} is not a Slack id (uppercase letters and "
            f"digits): skipped, with the day files of its folder {folder!r}",
        )

    def handle(self, user_id: str) -> str:
        """A user's handle (`name`), else the id: how DMs are named."""
        user = self.users.get(user_id)
        name = user.get("name") if user else None
        return name if isinstance(name, str) and name else user_id

    def stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        """Stream every day file into the stage tables; return coverage and counts."""
        try:
            return self._stage(connection)
        finally:
            self.reader.close()

    def _stage(self, connection: duckdb.DuckDBPyConnection) -> Staged:
        staging = Staging(connection, self.warnings, self.workspace_id, self.settings)
        authors = Authors(self.users, self.warnings)
        seen: set[str] = set()
        self.day_files.sort(key=self._read_order)
        for channel_id, member, day in self.day_files:
            where = self.reader.describe(member)
            day_messages = self.reader.load_json(member)
            if not isinstance(day_messages, list):
                raise SlackqueryError(
                    f"{where}: a day file must be a JSON list of messages, "
                    f"got {type(day_messages).__name__}"
                )
            staging.days.append(day)
            for message in day_messages:
                found = staging.valid_ts(where, message, allow_number=True)
                if found is None:  # which stored message it was is unknown: keep the day's
                    staging.protect_day(channel_id, day)
                    continue
                staging.add_slack_message(
                    message,
                    authors=authors,
                    channel_id=channel_id,
                    ts_us=found[1],
                    day=day,
                    where=where,
                    seen=seen,
                    local_paths=self.local_paths,
                )
        authors.warn_unknown()
        channels = [
            slack_channel_row(
                self.workspace_id,
                info["entry"],
                conversation_type=info["type"],
                folder=info["folder"],
                handle=self.handle,
            )
            for info in self.conversations.values()
        ]
        return staging.finish(
            source_format=self.source_format,
            users=authors.rows(self.workspace_id),
            channels=channels,
            team_name_hint=self.team_name_hint,
            copy_evidence=self.copy_evidence,
            covered=sorted(self.covered),
        )


def _folder_key(folder: str) -> str:
    """How a folder name is matched: NFC, as list names are (macOS tools write NFD)."""
    return unicodedata.normalize("NFC", folder)


def _profile_team(user: dict[str, Any]) -> Any:
    profile = user.get("profile")
    return profile.get("team") if isinstance(profile, dict) else None
