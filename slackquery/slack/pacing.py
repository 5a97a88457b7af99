"""Per-method pacing of Slack Web API calls, on a clock that tests replace with a fake one.

Slack limits each method per workspace and app by tier (1: 1+/min, 2: 20+/min, 3: 50+/min,
4: 100+/min). The limiter spaces the *starts* of calls to one method by 60/N seconds, so no
60-second window ever holds more than N of them; a 429's Retry-After holds that method
back for exactly the time Slack asked for.
"""

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

from slackquery.errors import SlackqueryError

TIER_PER_MINUTE = {1: 1.0, 2: 20.0, 3: 50.0, 4: 100.0}
METHOD_TIERS = {
    "auth.test": 4,
    "team.info": 3,
    "users.list": 2,
    "conversations.list": 2,
    "conversations.members": 4,
    "conversations.history": 3,
    "conversations.replies": 3,
}
# Newer non-Marketplace apps: conversations.history/replies at 1 request a minute, 15 a page.
MESSAGE_METHODS = ("conversations.history", "conversations.replies")
NON_MARKETPLACE_PER_MINUTE = 1.0
NON_MARKETPLACE_PAGE = 15
PRESETS = ("tiers", "non-marketplace", "0")


class Clock(Protocol):
    """What pacing and backoff need from time: a monotonic reading, wall time, a wait."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        """Seconds on the monotonic clock."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Block for `seconds`."""
        time.sleep(seconds)


@dataclass(frozen=True)
class Pacing:
    """Requests per minute per method (0 = unpaced) and the page cap for message methods."""

    name: str
    per_minute: dict[str, float]
    message_page_cap: int | None = None

    def interval(self, method: str) -> float:
        """Seconds between the starts of two calls to `method`."""
        rate = self.per_minute.get(method, 0.0)
        return 60.0 / rate if rate > 0 else 0.0

    def calls_in_a_minute(self, method: str, wanted: int) -> int:
        """`wanted` calls to `method`, or fewer: no more than its pace allows in a minute
        (but one, when paced slower than one a minute)."""
        rate = self.per_minute.get(method, 0.0)
        return min(wanted, max(1, math.floor(rate))) if rate > 0 else wanted

    def page_size(self, method: str, wanted: int) -> int:
        """The `limit` to ask `method` for."""
        if self.message_page_cap is not None and method in MESSAGE_METHODS:
            return min(wanted, self.message_page_cap)
        return wanted


def pacing_from_setting(value: str) -> Pacing:
    """The pacing that `slack_requests_per_minute` names (a preset or a number)."""
    tiers = {method: TIER_PER_MINUTE[tier] for method, tier in METHOD_TIERS.items()}
    if value == "tiers":
        return Pacing("tiers", tiers)
    if value == "non-marketplace":
        limited = {**tiers, **dict.fromkeys(MESSAGE_METHODS, NON_MARKETPLACE_PER_MINUTE)}
        return Pacing("non-marketplace", limited, NON_MARKETPLACE_PAGE)
    try:
        rate = float(value)
    except ValueError as error:
        raise SlackqueryError(
            f"slack_requests_per_minute {value!r}: not a preset or number"
        ) from error
    if rate == 0:
        return Pacing("0 (unpaced)", {})
    return Pacing(f"{rate:g}/min", dict.fromkeys(METHOD_TIERS, rate))


@dataclass
class Limiter:
    """Waits before each call so that no method exceeds its pace; counts the time waited
    (pacing and Retry-After alike: the summary's "time spent waiting on rate limits")."""

    pacing: Pacing
    clock: Clock
    next_at: dict[str, float] = field(default_factory=dict)
    waited_s: float = 0.0

    def wait(self, method: str) -> None:
        """Block until `method` may be called again, then book this call."""
        now = self.clock.monotonic()
        ready = self.next_at.get(method, -math.inf)
        if ready > now:
            self.waited_s += ready - now
            self.clock.sleep(ready - now)
            now = ready
        self.next_at[method] = now + self.pacing.interval(method)

    def hold(self, method: str, seconds: float) -> None:
        """Slack said `Retry-After: seconds`: the next call to `method` waits exactly that."""
        self.next_at[method] = self.clock.monotonic() + seconds

    def remaining_s(self, method: str, calls: int) -> float:
        """Least time `calls` more calls to `method` take at this pace (the ETA's basis)."""
        return max(0, calls) * self.pacing.interval(method)
