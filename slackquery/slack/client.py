"""A Slack Web API client over httpx: paced per method, retrying, with classified errors.

- `429` waits exactly its `Retry-After`; `5xx`, timeouts and connection errors back off
  exponentially with full jitter up to `slack_backoff_max_s`; after
  `slack_max_attempts` the run stops.
- `invalid_auth`, `token_revoked`, `missing_scope` (and the other token errors) stop the
  run with a message that names the missing scope; `not_in_channel` and
  `channel_not_found` raise `ChannelUnavailable`, which the sync turns into a warning.
The token travels only in the Authorization header: it is never part of a URL, a log
line, an error message or anything written to disk.
"""

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx

from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from slackquery.slack.pacing import Clock, Limiter, Pacing, SystemClock, pacing_from_setting

STOP_ERRORS = {
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "missing_scope",
    "no_permission",
}
CHANNEL_ERRORS = {"not_in_channel", "channel_not_found"}
BACKOFF_BASE_S = 1.0


class SlackApiError(SlackqueryError):
    """A Web API call failed for good."""

    def __init__(self, method: str, error: str, detail: str = "") -> None:
        self.method = method
        self.error = error
        super().__init__(f"Slack {method}: {error}" + (f" ({detail})" if detail else ""))


class SlackTransientError(SlackApiError):
    """Every attempt met a 429, a 5xx or a timeout: worth a later retry, which resumes."""


class ChannelUnavailable(SlackApiError):
    """The token cannot read this conversation (not a member, or it is gone)."""


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
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "SlackClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One Web API call (form-encoded POST), retried on 429/5xx/timeouts; its JSON body."""
        data = {key: str(value) for key, value in params.items() if value is not None}
        attempts = self.settings.slack_max_attempts
        last = "no attempt"
        for attempt in range(1, attempts + 1):
            self.limiter.wait(method)
            self.requests[method] += 1
            try:
                response = self._http.post(method, data=data)
            except (httpx.TimeoutException, httpx.TransportError) as error:
                last = type(error).__name__
                self._backoff(method, attempt)
                continue
            if response.status_code == 429:
                last = "HTTP 429"
                self.retries[method] += 1
                self.limiter.hold(method, _retry_after(response))
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}"
                self._backoff(method, attempt)
                continue
            return self._result(method, response)
        raise SlackTransientError(method, "gave up", f"{attempts} attempts, last: {last}")

    def _result(self, method: str, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError as error:
            raise SlackApiError(method, f"HTTP {response.status_code}", "not JSON") from error
        if not isinstance(body, dict):
            raise SlackApiError(method, "unexpected response", type(body).__name__)
        if body.get("ok") is True:
            return body
        error = str(body.get("error") or f"HTTP {response.status_code}")
        if error in STOP_ERRORS:
            raise SlackApiError(method, error, _stop_message(method, body))
        if error in CHANNEL_ERRORS:
            raise ChannelUnavailable(method, error)
        raise SlackApiError(method, error)

    def _backoff(self, method: str, attempt: int) -> None:
        """Full jitter: a random wait up to base x 2^(attempt-1), capped."""
        self.retries[method] += 1
        if attempt < self.settings.slack_max_attempts:
            cap = min(self.settings.slack_backoff_max_s, BACKOFF_BASE_S * 2 ** (attempt - 1))
            self.clock.sleep(self.rng.uniform(0, cap))

    def pages(self, method: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of a cursor-paged method, starting at `cursor` when one is given."""
        cursor = params.pop("cursor", None)
        while True:
            body = self.call(method, **params, cursor=cursor)
            yield body
            cursor = next_cursor(body)
            if not cursor:
                return


def next_cursor(body: dict[str, Any]) -> str | None:
    """The cursor of the page after `body`, or None on the last page."""
    metadata = body.get("response_metadata")
    cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
    return cursor or None


def _retry_after(response: httpx.Response) -> float:
    """Retry-After in seconds (Slack sends whole seconds; default 1 when absent)."""
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0
