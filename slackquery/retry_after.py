"""`Retry-After` (RFC 9110), read one way for both HTTP clients: the Slack Web API's and
the embedding endpoints'."""

import email.utils
import math
from datetime import UTC, datetime


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """The delay a `Retry-After` header asks for, in seconds: delay-seconds or an HTTP-date
    (one in the past: 0). None when absent or unreadable, a number that is not finite and
    non-negative included (`inf` would overflow a clock); callers then use their own
    backoff."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _seconds_until(text, now)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _seconds_until(http_date: str, now: datetime) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())
