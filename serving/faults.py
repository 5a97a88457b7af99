"""What requesters may read about why the server cannot answer.

The operator's reasons name files, build ids, endpoint URLs and commands; requesters are
not trusted with them, so `/readyz` and every tool error give a fixed wording, and the
server log the operator's.
"""

from serving.artifact import ArtifactUnavailable, DamagedArtifact
from slackquery.access.grants import GrantsUnreadable
from slackquery.embedding.base import GenerationMismatchError
from slackquery.embedding.errors import EmbedderMisconfigured, EndpointValidationError

# The server's own faults, not the request's: whatever the request, it gets the same error.
SERVER_FAULTS = (
    ArtifactUnavailable,
    GenerationMismatchError,
    EndpointValidationError,
    EmbedderMisconfigured,
)


def public_reason(error: Exception) -> str:
    """What a requester may read about one of `SERVER_FAULTS`."""
    if isinstance(error, GenerationMismatchError):
        return (
            "embedding generation mismatch between the configured model and the artifact, "
            "so hybrid and semantic search fail"
        )
    if isinstance(error, EndpointValidationError):
        return "the embedding endpoint failed validation, so hybrid and semantic search fail"
    if isinstance(error, EmbedderMisconfigured):
        return "the embedding model is misconfigured, so hybrid and semantic search fail"
    if isinstance(error, GrantsUnreadable):
        return "the access grants cannot be read, so granted tokens are refused"
    if isinstance(error, DamagedArtifact):
        return "the published search artifact is damaged (`slackquery reconcile` replaces it)"
    return "no servable artifact"
