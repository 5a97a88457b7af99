"""Grants: one requester token per Slack user of one workspace, stored only as a hash.

The grants file (`SLACKQUERY_HOME/access/grants.json`, mode 0600) is the one source of
who may query the MCP server as whom. It never travels into an artifact. A token is shown
once, when it is granted; the file keeps its sha256, so reading the file does not give
anyone a token. Tokens are 256 random bits, so a plain hash cannot be brute-forced.
The server re-reads the file whenever it changes (checked by stat on every request), so
a revoke takes effect on the next request without a restart.

A grant is named by its id (`g_` and 12 hex digits, made here) or by its label (chosen by
the operator, checked by `check_label`). A label can never take the shape of an id, so
that one word never names two grants; `revoke` still refuses a word that does (a grants
file written before labels were checked) rather than pick one.
"""

import hashlib
import hmac
import json
import re
import secrets
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from slackquery.artifacts.files import write_json_atomic
from slackquery.errors import SlackqueryError
from slackquery.escaping import quoted
from slackquery.folders import make_folder
from slackquery.settings import Settings

TOKEN_PREFIX = "sqr_"
# A label is a name shown in one row of `access list`, next to the grant's id and user:
# the default, WORKSPACE_ID:USER_ID, is about 25 characters, and 100 leaves room for any
# name a person would type while keeping the row (and an error quoting it) one line.
LABEL_MAX_CHARS = 100
# The shape of a grant id (`g_` + hex digits, any case, any length): refused as a label,
# so that `revoke` can never read one word as one grant's id and another's label.
_ID_SHAPED = re.compile(r"g_[0-9a-f]+", re.IGNORECASE)


def check_label(label: str) -> str:
    """The label, if it is a short printable one-line name; else a one-line error.

    Printable is `str.isprintable`: letters, marks, digits, punctuation and symbols of any
    script, and the plain space. That leaves out control characters (ESC sequences,
    newlines, tabs), format characters (bidi overrides, zero-width spaces), line and
    paragraph separators, other spaces, unassigned and private-use code points: all
    invisible, or able to rewrite or split the row that shows the label. A label also may
    not start with `-` (`access revoke` would read it as an option) or start or end with
    a space (invisible in the listing).
    """
    if not label:
        raise SlackqueryError(
            f"--label is empty; a label is 1 to {LABEL_MAX_CHARS} printable characters"
        )
    if len(label) > LABEL_MAX_CHARS:
        raise SlackqueryError(
            f"--label is {len(label):,} characters long; a label is at most "
            f"{LABEL_MAX_CHARS} printable characters"
        )
    unprintable = next((char for char in label if not char.isprintable()), None)
    if unprintable is not None:
        raise SlackqueryError(
            f"--label {quoted(label)} has U+{ord(unprintable):04X}, which is not printable; "
            "a label is one line of letters, digits, punctuation, symbols and spaces"
        )
    if label != label.strip(" "):
        raise SlackqueryError(
            f"--label {quoted(label)} starts or ends with a space; a label starts and ends "
            "with a visible character"
        )
    if label.startswith("-"):
        raise SlackqueryError(
            f"--label {quoted(label)} starts with '-', which `access revoke` would read as "
            "an option; pick another --label"
        )
    if _ID_SHAPED.fullmatch(label):
        raise SlackqueryError(
            f"--label {quoted(label)} has the shape of a grant id (g_ and hex digits), so "
            "`access revoke` could not tell it from one; pick another --label"
        )
    return label


@dataclass(frozen=True)
class Grant:
    """One grant as stored: everything but the token itself."""

    grant_id: str
    label: str
    user_id: str
    workspace_id: str
    no_dms: bool
    expires: str | None  # YYYY-MM-DD: the last UTC day the token works
    created_at: str
    revoked_at: str | None
    token_sha256: str

    def is_active(self, now: datetime) -> bool:
        """Not revoked and not past its last day (UTC)."""
        if self.revoked_at is not None:
            return False
        return self.expires is None or now.astimezone(UTC).date() <= date.fromisoformat(
            self.expires
        )

    def public(self, now: datetime) -> dict[str, object]:
        """What `access list` shows: no token, no hash."""
        shown = asdict(self)
        del shown["token_sha256"]
        shown["active"] = self.is_active(now)
        return shown


class GrantsUnreadable(SlackqueryError):
    """The grants file cannot be read, or was lost from the folder the first grant made: no
    granted token can be checked."""


def grants_path(settings: Settings) -> Path:
    """Where the grants of this home live."""
    return settings.home / "access" / "grants.json"


def token_hash(token: str) -> str:
    """sha256 hex of a token, as the grants file stores it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class GrantStore:
    """Reads and writes the grants file; `authenticate` re-reads it only when it changed."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._grants: list[Grant] = []

    def grants(self) -> list[Grant]:
        """Every grant, revoked and expired ones included (cached by file mtime and size).

        Empty before the first grant. A file lost since (`any_grants`) is as unreadable as
        a damaged one: read as empty, it would refuse every granted token as unknown, with
        nothing logged, while the server looked ready."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if self.any_grants():
                raise GrantsUnreadable(
                    f"grants file {self.path} is missing, though grants were made: restore "
                    "it from a backup, or remove its folder to grant anew"
                ) from None
            return []
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key != self._seen:
                try:
                    rows = json.loads(self.path.read_text(encoding="utf-8"))["grants"]
                    self._grants = [Grant(**row) for row in rows]
                except (OSError, ValueError, KeyError, TypeError) as error:
                    raise GrantsUnreadable(
                        f"grants file {self.path} is unreadable: {error}"
                    ) from None
                self._seen = key
            return list(self._grants)

    def any_grants(self) -> bool:
        """Whether any grant was ever made: from then on the server requires tokens. The
        folder the first grant made counts as one, and so does a grants file this store
        once read: a file lost, or its whole folder moved away while a server runs, leaves
        the admin token alone working, never the server open to all."""
        return self._seen is not None or self.path.parent.is_dir()

    def authenticate(self, token: str, now: datetime) -> Grant | None:
        """The active grant this token belongs to, or None (unknown, revoked or expired)."""
        supplied = token_hash(token)
        found = None
        for grant in self.grants():
            if hmac.compare_digest(grant.token_sha256, supplied):
                found = grant
        return found if found is not None and found.is_active(now) else None

    def _write(self, grants: list[Grant]) -> None:
        make_folder(self.path.parent)
        write_json_atomic(self.path, {"grants": [asdict(grant) for grant in grants]}, mode=0o600)

    def add(
        self,
        *,
        user_id: str,
        workspace_id: str,
        label: str,
        no_dms: bool,
        expires: str | None,
        now: datetime,
    ) -> tuple[Grant, str]:
        """Store a new grant; return it and its token (the only time the token exists)."""
        check_label(label)
        grants = self.grants()
        if any(grant.label == label for grant in grants):
            raise SlackqueryError(f"a grant labelled {quoted(label)} exists; pick another --label")
        # A label written before labels were checked may have an id's shape: a new id never
        # takes one (nor an id in use), so that no word names two grants.
        taken = {name for grant in grants for name in (grant.grant_id, grant.label)}
        grant_id = "g_" + secrets.token_hex(6)
        while grant_id in taken:
            grant_id = "g_" + secrets.token_hex(6)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        grant = Grant(
            grant_id=grant_id,
            label=label,
            user_id=user_id,
            workspace_id=workspace_id,
            no_dms=no_dms,
            expires=expires,
            created_at=now.astimezone(UTC).isoformat(),
            revoked_at=None,
            token_sha256=token_hash(token),
        )
        # Only a past expiry leaves a new grant inactive: its token could never work.
        if not grant.is_active(now):
            raise SlackqueryError(
                f"--expires {expires} is past: it is the last UTC day the token works, so "
                f"it must be {now.astimezone(UTC).date()} or later"
            )
        self._write([*grants, grant])
        return grant, token

    def revoke(self, label_or_id: str, now: datetime, *, by_id: bool = False) -> Grant:
        """Mark one grant revoked (kept for the record); unknown ones are an error.

        `label_or_id` names a grant by its id or its label (`by_id`: by its id only). A
        word that names more than one grant (one grant's id and another's label, in a
        grants file written before labels were checked) is refused: nothing is revoked.
        """
        grants = self.grants()
        matches = [
            index
            for index, grant in enumerate(grants)
            if label_or_id == grant.grant_id or (not by_id and label_or_id == grant.label)
        ]
        if not matches:
            named = "id" if by_id else "label or id"
            raise SlackqueryError(
                f"no grant with {named} {quoted(label_or_id)} (see `access list`)"
            )
        if len(matches) > 1:
            names = ", ".join(
                f"the id of {grants[index].grant_id}"
                if grants[index].grant_id == label_or_id
                else f"the label of {grants[index].grant_id}"
                for index in matches
            )
            raise SlackqueryError(
                f"{quoted(label_or_id)} names {len(matches)} grants ({names}); nothing was "
                "revoked: name one by its id alone with `access revoke --id GRANT_ID`"
            )
        index = matches[0]
        grant = grants[index]
        if grant.revoked_at is not None:
            raise SlackqueryError(f"grant {quoted(label_or_id)} is already revoked")
        revoked = Grant(**{**asdict(grant), "revoked_at": now.astimezone(UTC).isoformat()})
        grants[index] = revoked
        self._write(grants)
        return revoked
