"""A Slack Web API client over httpx: paced per method, retrying, with classified errors.

- `429`, and an `ok: false` body with `ratelimited`, wait their `Retry-After`, at most
  RETRY_AFTER_MAX_S (15 minutes) in all per call: when the wait Slack asks for would take
  the call past that, the run stops at once, without waiting, with `SlackTransientError`.
  `5xx`, timeouts, connection errors and the transient `ok: false` errors (`internal_error`,
  `fatal_error`, `service_unavailable`, `request_timeout`) back off exponentially with full
  jitter up to `slack_backoff_max_s` (not counted in those 15 minutes). After
  `slack_max_attempts` the run stops with `SlackTransientError` too; the flow retries it,
  and the next run resumes where this one stopped.
- `invalid_auth`, `token_revoked`, `missing_scope` (and the other token errors) stop the
  run with a message that names the missing scope, and so do the errors that say the
  request itself is wrong (REQUEST_ERRORS: every call would get them). Any other error of
  a call about one conversation (`not_in_channel`, `channel_not_found`, `ekm_access_denied`,
  or one this client does not know) raises `ConversationError` (`ChannelUnavailable` for
  the first two), which the sync turns into a warning that skips that conversation.
- A 2xx body that is not JSON (cut short, or a proxy's HTML page) is retried like a 5xx.
- A page that cannot be trusted to be whole (its entries are not a list, it says
  `has_more` without a cursor, or its cursor was already followed) is an error: taking it
  as the last page would make the sync tombstone what it never read. So is a run of more
  than MAX_EMPTY_PAGES empty pages that keep promising more (a loop with fresh cursors).
The token travels only in the Authorization header: it is never part of a URL, a log
line, an error message or anything written to disk.
"""

import logging
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx

from slackquery.errors import SlackqueryError
from slackquery.retry_after import parse_retry_after
from slackquery.settings import Settings
from slackquery.slack.pacing import Clock, Limiter, Pacing, SystemClock, pacing_from_setting
from slackquery.tls import client_context

STOP_ERRORS = {
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "missing_scope",
    "no_permission",
}
# Errors that say the request itself is wrong, not the conversation it is about: every
# conversation would get them, so they stop the run instead of skipping each one in turn.
REQUEST_ERRORS = {
    "invalid_arguments",
    "invalid_arg_name",
    "invalid_array_arg",
    "invalid_charset",
    "invalid_form_data",
    "invalid_post_type",
    "missing_post_type",
    "unknown_method",
    "method_deprecated",
    "deprecated_endpoint",
    "not_allowed_token_type",
}
CHANNEL_ERRORS = {"not_in_channel", "channel_not_found"}
# `ok: false` errors that Slack documents as temporary: worth the same retries as a 5xx.
TRANSIENT_ERRORS = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
RATE_LIMITED = "ratelimited"
BACKOFF_BASE_S = 1.0
RETRY_AFTER_DEFAULT_S = 1.0
# The most one call waits on Retry-After, all its attempts together: a longer wait is not
# worth holding the run and the store's writer lock for (every page is committed with its
# checkpoint, so the next scheduled run resumes and loses nothing).
RETRY_AFTER_MAX_S = 900.0

log = logging.getLogger(__name__)


class SlackApiError(SlackqueryError):
    """A Web API call failed for good."""

    def __init__(self, method: str, error: str, detail: str = "") -> None:
        self.method = method
        self.error = error
        self.detail = detail
        super().__init__(f"Slack {method}: {error}" + (f" ({detail})" if detail else ""))


class SlackTransientError(SlackApiError):
    """Every attempt met a rate limit, a server error or a timeout: worth a later retry,
    which resumes."""


class ConversationError(SlackApiError):
    """Slack refused a call about one conversation with an error of that conversation's
    (`ekm_access_denied`, or one this client does not know): the sync skips it and reads
    the others."""


class ChannelUnavailable(ConversationError):
    """The token cannot read this conversation (not a member, or it is gone)."""


class _Retry(Exception):
    """One attempt failed for a passing reason; `hold_s` is the wait Slack asked for."""

    def __init__(self, reason: str, hold_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hold_s = hold_s


def _too_long(reason: str, asked_s: float, held_s: float) -> str:
    after = f" more after {held_s:g} s" if held_s else ""
    return (
        f"{reason}: Slack asked to wait {asked_s:g} s{after}, longer than the "
        f"{RETRY_AFTER_MAX_S:g} s a run waits per call; the next run resumes"
    )


def _stop_message(method: str, body: dict[str, Any]) -> str:
    error = str(body.get("error"))
    if error == "missing_scope":
        return (
            f"the token lacks the scope {body.get('needed') or '?'} (it has: "
            f"{body.get('provided') or '?'}); add the scope to the Slack app and reinstall it"
        )
    if error in ("token_revoked", "token_expired", "account_inactive"):
        return "the token no longer works; create a new one and set SLACKQUERY_SLACK_TOKEN"
    return "check SLACKQUERY_SLACK_TOKEN (an xoxb- bot or xoxp- user token)"


class SlackClient:
    """Calls Web API methods at their pace; `requests` counts calls per method."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        pacing: Pacing | None = None,
    ) -> None:
        if settings.slack_token is None or not settings.slack_token.get_secret_value():
            raise SlackqueryError(
                "no Slack token: set SLACKQUERY_SLACK_TOKEN to an xoxb- (bot) or xoxp- (user) token"
            )
        self.settings = settings
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.pacing = pacing or pacing_from_setting(settings.slack_requests_per_minute)
        self.limiter = Limiter(self.pacing, self.clock)
        self.requests: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self._http = httpx.Client(
            base_url=settings.slack_api_url.rstrip("/") + "/",
            headers={"Authorization": f"Bearer {settings.slack_token.get_secret_value()}"},
            timeout=settings.slack_timeout_s,
            verify=client_context(),
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "SlackClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One Web API call (form-encoded POST), retried on rate limits, server errors and
        timeouts; its JSON body.

        Its Retry-After waits add up to at most RETRY_AFTER_MAX_S: a wait that would take
        them past it (a single `Retry-After` longer than that included) is not waited, the
        call gives up at once with `SlackTransientError`.
        """
        data = {key: str(value) for key, value in params.items() if value is not None}
        attempts = self.settings.slack_max_attempts
        held_s = 0.0  # Retry-After this call has waited so far
        last = "no attempt"
        for attempt in range(1, attempts + 1):
            self.limiter.wait(method)
            self.requests[method] += 1
            try:
                return self._result(method, self._post(method, data), about="channel" in data)
            except _Retry as retry:
                last = retry.reason
                if retry.hold_s is None:
                    self._backoff(method, attempt, retry.reason)
                    continue
                if held_s + retry.hold_s > RETRY_AFTER_MAX_S:
                    detail = _too_long(retry.reason, retry.hold_s, held_s)
                    # from None: the _Retry is this loop's own signal, not a cause to show.
                    raise SlackTransientError(method, "gave up", detail) from None
                held_s += retry.hold_s
                self.retries[method] += 1
                self.limiter.hold(method, retry.hold_s)
        raise SlackTransientError(method, "gave up", f"{attempts} attempts, last: {last}")

    def _post(self, method: str, data: dict[str, str]) -> httpx.Response:
        try:
            return self._http.post(method, data=data)
        except (httpx.TimeoutException, httpx.TransportError) as error:
            # Where and why, so that a wrong SLACKQUERY_SLACK_API_URL shows in the error.
            raise _Retry(f"{type(error).__name__} at {self._http.base_url}: {error}") from error

    def _result(
        self, method: str, response: httpx.Response, *, about: bool = False
    ) -> dict[str, Any]:
        """The body of a call that succeeded; else the error it is (`about`: the call is
        about one conversation, so an error not known to be wider is that conversation's)."""
        if response.status_code == 429:
            raise _Retry("HTTP 429", self._retry_after_s(response))
        if response.status_code >= 500:
            raise _Retry(f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as error:
            status = f"HTTP {response.status_code}"
            if response.is_success:
                # A body cut short, or a proxy's HTML page: the same request may well work.
                raise _Retry(f"{status} (not JSON)") from error
            raise SlackApiError(method, status, "not JSON") from error
        if not isinstance(body, dict):
            raise SlackApiError(method, "unexpected response", type(body).__name__)
        if body.get("ok") is True:
            return body
        error = str(body.get("error") or f"HTTP {response.status_code}")
        if error == RATE_LIMITED:
            raise _Retry(error, self._retry_after_s(response))
        if error in TRANSIENT_ERRORS:
            raise _Retry(error)
        if error in STOP_ERRORS:
            raise SlackApiError(method, error, _stop_message(method, body))
        if error in CHANNEL_ERRORS:
            raise ChannelUnavailable(method, error)
        if about and error not in REQUEST_ERRORS:
            raise ConversationError(method, error)
        raise SlackApiError(method, error)

    def _retry_after_s(self, response: httpx.Response) -> float:
        return retry_after_s(response.headers.get("Retry-After"), now=self.clock.time())

    def _backoff(self, method: str, attempt: int, reason: str) -> None:
        """Full jitter: a random wait up to base x 2^(attempt-1), capped. Said in a warning:
        an API that cannot be reached otherwise costs a minute of silence before the error."""
        self.retries[method] += 1
        attempts = self.settings.slack_max_attempts
        if attempt < attempts:
            cap = min(self.settings.slack_backoff_max_s, BACKOFF_BASE_S * 2 ** (attempt - 1))
            wait_s = self.rng.uniform(0, cap)
            log.warning(
                "%s failed (%s); attempt %d of %d in %.1f s",
                method,
                reason,
                attempt + 1,
                attempts,
                wait_s,
            )
            self.clock.sleep(wait_s)

    def items(self, method: str, key: str, **params: Any) -> Iterator[Any]:
        """Every entry of `key` (`members`, `channels`) on every page of a cursor-paged
        method; each page is checked whole before its entries are handed out."""
        trail = CursorTrail(method)
        cursor = None
        while True:
            body = self.call(method, **params, cursor=cursor)
            entries = page_items(method, body, key)
            cursor = trail.follow(body, len(entries))
            yield from entries
            if cursor is None:
                return


# Empty pages in a row that still promise more, before a read is taken for a server's loop:
# Slack's filtered lists send a few (3 in a row were seen in `conversations.list`).
MAX_EMPTY_PAGES = 100


def page_items(method: str, body: dict[str, Any], key: str) -> list[Any]:
    """The entries of one page (`messages`, `members`, ...); an error unless they are a list."""
    entries = body.get(key)
    if not isinstance(entries, list):
        found = "missing" if entries is None else f"a {type(entries).__name__}"
        raise SlackApiError(method, "malformed page", f"{key!r} is {found}, not a list")
    return entries


class CursorTrail:
    """The cursors one paged read has followed: what tells its next page from its end, or
    from a loop."""

    def __init__(self, method: str, start: str | None = None) -> None:
        self.method = method
        self.followed = {start} if start else set()
        self.empty_in_a_row = 0

    def follow(self, body: dict[str, Any], entries: int) -> str | None:
        """The cursor of the page after `body` (which held `entries`), or None on the last.

        A page that says `has_more` without a cursor, a cursor that is not a string, a
        cursor this read already followed, and more than MAX_EMPTY_PAGES empty pages in a
        row that still promise more (each with a new cursor: a loop the cursors do not
        show) are errors; Slack's lists do send a few empty pages.
        """
        self.empty_in_a_row = 0 if entries else self.empty_in_a_row + 1
        if self.empty_in_a_row > MAX_EMPTY_PAGES:
            raise SlackApiError(
                self.method,
                "empty pages",
                f"{self.empty_in_a_row} pages in a row held nothing yet promised more",
            )
        metadata = body.get("response_metadata")
        cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
        if cursor is None or cursor == "":
            if body.get("has_more") is True:
                raise SlackApiError(
                    self.method, "malformed page", "has_more is true but there is no next_cursor"
                )
            return None
        if not isinstance(cursor, str):
            raise SlackApiError(
                self.method, "malformed page", f"next_cursor is a {type(cursor).__name__}"
            )
        if cursor in self.followed:
            raise SlackApiError(
                self.method, "cursor loop", f"next_cursor {cursor[:40]!r} was already followed"
            )
        self.followed.add(cursor)
        return cursor


def retry_after_s(value: str | None, *, now: float) -> float:
    """The seconds a `Retry-After` header asks to wait (`parse_retry_after`), as asked:
    not capped here, because a wait the run will not make is refused, not shortened
    (`SlackClient.call` gives up once a call's waits would pass RETRY_AFTER_MAX_S, 15
    minutes; the next run resumes); RETRY_AFTER_DEFAULT_S when absent or unreadable."""
    seconds = parse_retry_after(value, datetime.fromtimestamp(now, UTC))
    return RETRY_AFTER_DEFAULT_S if seconds is None else seconds
