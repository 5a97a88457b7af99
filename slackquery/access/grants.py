"""Grants: one requester token per Slack user of one workspace, stored only as a hash.

The grants file (`SLACKQUERY_HOME/access/grants.json`, mode 0600) is the one source of
who may query the MCP server as whom. It never travels into an artifact. A token is shown
once, when it is granted; the file keeps its sha256, so reading the file does not give
anyone a token. Tokens are 256 random bits, so a plain hash cannot be brute-forced.
The server re-reads the file whenever it changes (checked by stat on every request), so
a revoke takes effect on the next request without a restart.
"""

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from slackquery.artifacts.files import write_json_atomic
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

TOKEN_PREFIX = "sqr_"


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
        """Every grant, revoked and expired ones included (cached by file mtime and size)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key != self._seen:
                try:
                    rows = json.loads(self.path.read_text(encoding="utf-8"))["grants"]
                    self._grants = [Grant(**row) for row in rows]
                except (OSError, ValueError, KeyError, TypeError) as error:
                    raise SlackqueryError(
                        f"grants file {self.path} is unreadable: {error}"
                    ) from None
                self._seen = key
            return list(self._grants)

    def any_grants(self) -> bool:
        """Whether any grant was ever made: from then on the server requires tokens."""
        return bool(self.grants())

    def authenticate(self, token: str, now: datetime) -> Grant | None:
        """The active grant this token belongs to, or None (unknown, revoked or expired)."""
        supplied = token_hash(token)
        found = None
        for grant in self.grants():
            if hmac.compare_digest(grant.token_sha256, supplied):
                found = grant
        return found if found is not None and found.is_active(now) else None

    def _write(self, grants: list[Grant]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
        grants = self.grants()
        if any(grant.label == label for grant in grants):
            raise SlackqueryError(f"a grant labelled {label!r} exists; pick another --label")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        grant = Grant(
            grant_id="g_" + secrets.token_hex(6),
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

    def revoke(self, label_or_id: str, now: datetime) -> Grant:
        """Mark one grant revoked (kept for the record); unknown ones are an error."""
        grants = self.grants()
        for index, grant in enumerate(grants):
            if label_or_id in (grant.grant_id, grant.label):
                if grant.revoked_at is not None:
                    raise SlackqueryError(f"grant {label_or_id!r} is already revoked")
                revoked = Grant(**{**asdict(grant), "revoked_at": now.astimezone(UTC).isoformat()})
                grants[index] = revoked
                self._write(grants)
                return revoked
        raise SlackqueryError(f"no grant with label or id {label_or_id!r} (see `access list`)")
