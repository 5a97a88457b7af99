"""Slack message permalinks: `https://<workspace>.slack.com/archives/<channel>/p<digits>`.

Parsing is strict and total: any string either yields the three parts or raises a
one-line `SlackqueryError`. `urllib.parse` raises `ValueError` of its own on hosts it
cannot read (a broken IPv6 literal `[::1`, characters that NFKC-normalise to URL
delimiters such as a fullwidth `＃`), so those are caught here too.
"""

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from slackquery.errors import SlackqueryError

_PATH = re.compile(r"/archives/([A-Z0-9]+)/p([0-9]{7,20})")
_SLUG = re.compile(r"[a-z0-9][a-z0-9.-]*")
_EXPECTED = (
    "not a Slack message permalink; expected "
    "https://<workspace>.slack.com/archives/<channel>/p<digits>"
)


@dataclass(frozen=True)
class Permalink:
    """What a permalink names: workspace slug (the host's first label), channel, message ts."""

    workspace_slug: str
    channel_id: str
    ts: str


def is_url(value: str) -> bool:
    """True when the value starts like an http(s) URL (and so must parse as a permalink)."""
    return value.strip().lower().startswith(("http://", "https://"))


def parse_permalink(value: str) -> Permalink:
    """The slug, channel id and `seconds.micros` ts of a permalink; SlackqueryError if not one."""
    try:
        parsed = urlsplit(value.strip())
        host = (parsed.hostname or "").lower()
    except ValueError:
        raise SlackqueryError(_EXPECTED) from None
    slug = host.removesuffix(".slack.com")
    match = _PATH.fullmatch(parsed.path)
    if slug == host or not _SLUG.fullmatch(slug) or match is None:
        raise SlackqueryError(_EXPECTED)
    channel_id, digits = match.groups()
    return Permalink(slug, channel_id, f"{digits[:-6]}.{digits[-6:]}")
