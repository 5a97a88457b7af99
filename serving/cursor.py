"""Opaque, signed pagination cursors.

A cursor is `base64url(json{a: artifact id, f: request fingerprint, o: offset}).signature`
with an HMAC-SHA256 signature, so a client can neither forge an offset nor reuse a cursor
with another query, filter set, mode, thread or artifact. Pages are slices of one
deterministic ranking (or of a thread in time order), so following cursors never repeats or
skips a document.
"""

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from slackquery.errors import SlackqueryError

_RESTART = "; repeat the request without a cursor to start again"


def fingerprint(payload: dict[str, object]) -> str:
    """sha256 of the canonical JSON of what defines a ranking (query, mode, filters)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def home_secret(path: Path) -> str | None:
    """The cursor key kept in `path` (created once, mode 0600), so that a cursor printed by
    one `slackquery search` process still works in the next; None (a random key per process)
    when its folder is missing or cannot hold it.

    Two processes creating it at once agree: the key is written aside and linked into place,
    which fails for the second, which then reads the first one's key.
    """
    if not path.parent.is_dir():
        return None
    try:
        if not path.exists():
            aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            descriptor = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="ascii") as handle:
                handle.write(secrets.token_urlsafe(32) + "\n")
            try:
                os.link(aside, path)
            except FileExistsError:
                pass
            finally:
                aside.unlink()
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


class CursorCodec:
    """Signs and checks cursors with one key (settings.cursor_secret or a random one)."""

    def __init__(self, secret: str | None = None):
        self._key = secret.encode("utf-8") if secret else secrets.token_bytes(32)

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest()[:18])

    def encode(self, artifact_id: str, request_fingerprint: str, offset: int) -> str:
        """A cursor for the page that starts at `offset`."""
        body = _b64(
            json.dumps(
                {"a": artifact_id, "f": request_fingerprint, "o": offset}, separators=(",", ":")
            ).encode("utf-8")
        )
        return f"{body}.{self._sign(body)}"

    def decode(self, cursor: str, artifact_id: str, request_fingerprint: str) -> int:
        """The offset a valid cursor points at; any mismatch is a clear error."""
        body, _, signature = cursor.strip().partition(".")
        # compare_digest refuses non-ASCII str, so both halves must be ASCII to be compared.
        if not body or not signature or len(cursor) > 512 or not cursor.isascii():
            raise SlackqueryError("cursor is not a cursor this server returned" + _RESTART)
        if not hmac.compare_digest(self._sign(body), signature):
            raise SlackqueryError(
                "cursor signature is invalid (signed with another key: another home's "
                "cursor.key or SLACKQUERY_CURSOR_SECRET, another server, or edited)" + _RESTART
            )
        try:
            payload = json.loads(_unb64(body))
            offset = int(payload["o"])
            cursor_artifact, cursor_fingerprint = str(payload["a"]), str(payload["f"])
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise SlackqueryError("cursor is malformed" + _RESTART) from None
        if cursor_artifact != artifact_id:
            raise SlackqueryError(
                "cursor belongs to another artifact than the published one (one was "
                "published or rolled back to since)" + _RESTART
            )
        if cursor_fingerprint != request_fingerprint:
            raise SlackqueryError(
                "cursor was issued for another query, mode, filter set or thread" + _RESTART
            )
        if offset < 0:
            raise SlackqueryError("cursor offset is out of range" + _RESTART)
        return offset
