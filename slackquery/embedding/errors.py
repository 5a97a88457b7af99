"""How an embedding attempt can fail, classified by what a retry could change.

The work loop and the Prefect flow decide on these classes alone: a transient failure
(transport error, timeout, HTTP 429/5xx) says nothing about the documents, so the whole batch
is retried later; an item failure (another 4xx, an invalid vector) is about specific
documents, so only they are charged an attempt that can end in `terminal_failed`.
"""

from slackquery.errors import SlackqueryError


class EmbedderMisconfigured(SlackqueryError):
    """The embedding settings name no model that can run as configured (a revision, prefix
    or dimension the packaged model does not have, a model that is not packaged)."""


class EndpointValidationError(SlackqueryError):
    """The configured embedding endpoint is not the model this generation needs."""


class TransientEmbeddingError(Exception):
    """A failure a later retry may not see: network, timeout, 429, 5xx.

    `retry_after` is the server's raw Retry-After header (delta-seconds or an HTTP-date),
    kept raw so the work loop converts it with its own (injectable) clock.
    """

    def __init__(self, error_class: str, message: str, retry_after: str | None = None):
        super().__init__(message)
        self.error_class = error_class
        self.retry_after = retry_after


class RequestRejectedError(Exception):
    """The endpoint refused the request itself (a 4xx other than 429): retrying it as is fails."""

    def __init__(self, error_class: str, message: str, status_code: int):
        super().__init__(message)
        self.error_class = error_class
        self.status_code = status_code
