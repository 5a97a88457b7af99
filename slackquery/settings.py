"""Typed settings, read from `SLACKQUERY_*` environment variables.

Every path derives from one root, `SLACKQUERY_HOME`; each can be overridden on its own.
Every field has a description: `slackquery settings` prints them, docs/settings.md lists
them, and a test checks the two agree.
"""

import math
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from slackquery.errors import SlackqueryError

# A DuckDB memory size: a number and a unit, 1000^i (K, KB, ...) or 1024^i (KiB, ...), any
# case. DuckDB also parses bytes and words (`gigabytes`), no percentages; a limit needs
# none of those, and nothing else may reach the SQL that sets it.
MEMORY_SIZE = re.compile(r"(\d+\.?\d*|\.\d+)\s*([KMGT](?:i?B)?)", re.IGNORECASE)
# The slowest pace a number may set: one request per method every 10 minutes. Slower
# waits would hold the canonical store's writer lock for hours per request (and
# vanishing rates overflow the pacing's arithmetic).
SLACK_MIN_REQUESTS_PER_MINUTE = 0.1


class Settings(BaseSettings):
    """All configuration of the pipeline, the embedder and the server."""

    # An empty variable is an unset one (`SLACKQUERY_HOME=` is the default home, not `.`).
    model_config = SettingsConfigDict(
        env_prefix="SLACKQUERY_", extra="ignore", frozen=True, env_ignore_empty=True
    )

    # --- paths ---------------------------------------------------------------------------
    home: Path = Field(
        default=Path(".slackquery"),
        description="Root folder; every other path defaults to a place under it. The folders "
        "Slackquery creates are private to its account (0700): they hold private channels "
        "and DMs; a folder that exists keeps its mode.",
    )
    canonical_db: Path | None = Field(
        default=None,
        description="Canonical Slack DuckDB (written only by `import` and `sync`). "
        "Default: HOME/canonical.duckdb.",
    )
    state_db: Path | None = Field(
        default=None,
        description="Pipeline state DuckDB (projection, embeddings, build history). "
        "Default: HOME/state.duckdb.",
    )
    artifact_dir: Path | None = Field(
        default=None,
        description="Folder of immutable search artifacts and the `current` pointer. "
        "Default: HOME/artifacts.",
    )
    log_dir: Path | None = Field(
        default=None, description="Folder for logs and run reports. Default: HOME/logs."
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="Folder keeping what a new process derives from the packaged model's "
        "weights (their sha256, remembered while the files are unchanged; the built "
        "onnxruntime graphs; e5's piece index; the 8 newest builds of each kind are kept), "
        "so it loads the model without redoing it "
        "(~0.6 s); safe to delete. Default: HOME/cache/models.",
    )

    # --- import --------------------------------------------------------------------------
    max_message_bytes: int = Field(
        default=1_000_000,
        ge=1,
        description="A message whose JSON (text, blocks, attachments) is larger than this many "
        "bytes is skipped with a warning.",
    )
    import_max_file_bytes: int = Field(
        default=1 << 30,
        ge=1,
        description="A file of an export (a day of one channel, users.json, ...) larger than "
        "this many bytes stops the import with an error before it is read: its JSON is parsed "
        "whole, and a small ZIP entry can expand to more memory than the machine has.",
    )
    import_memory_limit: str = Field(
        default="1536MB",
        description="DuckDB memory limit while importing (e.g. `1536MB`, `4GB`, `512MiB`); "
        "beyond it staged rows spill to disk, which keeps a 1M-message import under 3 GiB "
        "of RAM.",
    )

    # --- Slack Web API sync ---------------------------------------------------------------
    slack_token: SecretStr | None = Field(
        default=None,
        description="Slack bot (`xoxb-`) or user (`xoxp-`) token `sync` calls the Web API with; "
        "printable ASCII without spaces (a token read from a file with its newline is "
        "refused); never printed, logged or stored in the canonical store or an artifact.",
    )
    slack_api_url: str = Field(
        default="https://slack.com/api",
        description="Base URL of the Slack Web API (`<url>/conversations.history`, ...); point "
        "it at any server speaking the Web API, e.g. a local one in tests.",
    )
    slack_requests_per_minute: str = Field(
        default="tiers",
        description="Pacing of Web API calls: `tiers` (each method at its documented Slack "
        "tier: history/replies 50/min, lists 20/min), `non-marketplace` (tiers, but history "
        "and replies at 1/min with 15 messages a page, the limit of newer non-Marketplace "
        "apps), a number N from 0.1 (every method at most N/min), or `0` (no pacing, local "
        "servers).",
    )
    slack_page_size: int = Field(
        default=200,
        ge=1,
        le=999,
        description="Messages (or list entries) asked for per page (`limit`); the "
        "`non-marketplace` pacing caps history and replies at 15.",
    )
    slack_reread_days: float = Field(
        default=7.0,
        ge=0,
        description="Each sync re-reads this many days of every channel (and the replies of "
        "threads active in them) to catch edits and deletions.",
    )
    slack_thread_sweep_days: float = Field(
        default=90.0,
        ge=0,
        description="Threads whose last stored reply is older than the re-read window but "
        "newer than this many days are re-read a few per run, least recently read first, so "
        "a new reply to a thread gone quiet is found (its parent and replies are on no page "
        "a run reads otherwise); 0 turns the sweep off.",
    )
    slack_thread_sweep_per_run: int = Field(
        default=50,
        ge=0,
        description="Most threads the sweep re-reads per run, and never more than one minute "
        "of `conversations.replies` at the run's pacing allows (50 at `tiers`, 1 at "
        "`non-marketplace`); 0 turns the sweep off.",
    )
    slack_history_sweep_per_run: int = Field(
        default=50,
        ge=0,
        description="Conversations whose older history a run re-reads one page of (least "
        "recently swept first; each sweep moves a page further back, and starts again from "
        "the re-read window once Slack holds nothing older), so a message edited or deleted "
        "after the re-read window is found; never more than one minute of "
        "`conversations.history` at the run's pacing allows (50 at `tiers`, 1 at "
        "`non-marketplace`); 0 turns the sweep off.",
    )
    slack_timeout_s: float = Field(
        default=30.0, gt=0, description="HTTP timeout of one Web API request, seconds."
    )
    slack_max_attempts: int = Field(
        default=8,
        ge=1,
        description="Attempts per Web API request on rate limits (429, `ratelimited`), server "
        "errors (5xx, Slack's transient `ok: false` errors) and timeouts before the sync stops "
        "(rate limits wait Retry-After, at most 15 min in all per request: a longer wait stops "
        "the sync at once and the next run resumes; others back off exponentially with "
        "jitter).",
    )
    slack_backoff_max_s: float = Field(
        default=60.0, gt=0, description="Longest backoff between two attempts, seconds."
    )

    # --- embeddings ----------------------------------------------------------------------
    embedding_model: str = Field(
        default="ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2",
        description="Embedding model name; part of the embedding generation identity.",
    )
    embedding_transport: Literal["inprocess", "ollama", "openai"] = Field(
        default="inprocess",
        description="How documents and queries are embedded: the packaged model in-process, "
        "or an HTTP endpoint speaking the Ollama or OpenAI embeddings protocol.",
    )
    embedding_url: str = Field(
        default="http://127.0.0.1:11435",
        description="Base URL of the HTTP embedding endpoint (ollama/openai transports).",
    )
    embedding_api_key: str | None = Field(
        default=None, description="Bearer key sent to the HTTP embedding endpoint, if any."
    )
    embedding_batch_size: int = Field(
        default=128,
        ge=1,
        le=256,
        description="Documents per embedding request (and per claimed batch of an in-process "
        "run: claiming and recording a batch cost tens of milliseconds, measured 12% of a "
        "run at 32 documents a batch and 4% at 128, at 80 documents/s).",
    )
    embedding_dask_batch_size: int = Field(
        default=512,
        ge=1,
        le=4096,
        description="Documents per embedding task when the embed flow runs on Dask: each "
        "task pays scheduling and Prefect's task-run bookkeeping, so Dask gets larger "
        "batches than an in-process or HTTP run; the last batches of a run shrink so the "
        "workers finish together.",
    )
    embedding_timeout_s: float = Field(
        default=120.0, gt=0, description="HTTP timeout for one embedding request, seconds."
    )
    embedding_max_attempts: int = Field(
        default=5,
        ge=1,
        description="Attempts before an item the endpoint rejects (or returns an invalid "
        "vector for) becomes terminal_failed; an outage, rate limit, timeout or malformed "
        "response charges none. `slackquery embed --retry-failed` tries terminal_failed items "
        "again.",
    )
    embedding_lease_s: int = Field(
        default=900, ge=1, description="Seconds a claimed work item stays leased to one run."
    )
    embedding_model_revision: str | None = Field(
        default=None,
        description="Pinned revision or digest of the model (part of the generation identity). "
        "Default: the packaged model's version and weights hash, else the digest the "
        "endpoint reports, else `unpinned`. When set, the endpoint must report the same.",
    )
    embedding_dimension: int | None = Field(
        default=None,
        ge=1,
        description="Native vector dimension the model must return. Default: the packaged "
        "model's (768 for the default pair, 384 for e5 alone); required for any other model.",
    )
    embedding_query_prefix: str | None = Field(
        default=None,
        description="Text put before every query (client-side). Default: the packaged "
        "model's `query: `, else none (nomic-embed-text wants `search_query: `).",
    )
    embedding_document_prefix: str | None = Field(
        default=None,
        description="Text put before every document (client-side). Default: the packaged "
        "model's `passage: `, else none (nomic-embed-text wants `search_document: `).",
    )
    embedding_backoff_max_s: float = Field(
        default=300.0,
        gt=0,
        description="Longest delay before a failed work item is retried, seconds (capped "
        "exponential backoff with jitter; a larger Retry-After is honoured as sent).",
    )
    embed_server_max_batch: int = Field(
        default=256, ge=1, description="Most inputs one `embed-server` request may carry."
    )
    embed_server_max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="Largest request body `embed-server` reads, streamed bodies included.",
    )

    # --- artifacts -----------------------------------------------------------------------
    retain_artifacts: int = Field(
        default=3, ge=1, description="Newest artifacts kept besides the current one."
    )
    retention_min_age_s: int = Field(
        default=3_600,
        ge=0,
        description="Artifacts younger than this are never deleted (a reader may have just "
        "resolved the pointer to one). Each artifact is a whole copy, ~3.3 GB per million "
        "messages with its arrays, and a 15-minute sync deployment may build 4 an hour.",
    )
    max_count_drift: float = Field(
        default=0.5,
        ge=0,
        description="Largest relative drop in document or message count against the "
        "published artifact that validation accepts (0.5 = down to half); growth always "
        "passes. Set it to 1 to publish a deliberate larger drop.",
    )
    count_drift_min_drop: int = Field(
        default=100,
        ge=0,
        description="A drop of at most this many documents (or messages) always passes the "
        "count-drift check, however large relatively: a small archive may lose a channel.",
    )
    artifact_min_vector_coverage: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Least share of active message documents that must have a vector of the "
        "configured generation for `build` to build an artifact (1 = all). Below 1, the "
        "artifact is published with the vectors there are: lexical search covers every "
        "message, semantic ranking the embedded ones; 0 publishes before any embedding.",
    )
    artifact_max_rejected_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="Share of active message documents the embedding endpoint may have "
        "rejected for good (terminal_failed) that `build` counts as covered: searchable by "
        "their words only, so one unembeddable message does not hold every later publish "
        "back. More rejected than this and the coverage gate refuses, as for any missing "
        "vector (`slackquery embed --retry-failed` tries them again).",
    )
    artifact_build_memory_limit: str = Field(
        default="2GB",
        description="DuckDB memory_limit of the connection that copies state into a new "
        "artifact (e.g. `2GB`, `512MiB`); larger sorts spill to disk instead of growing the "
        "process.",
    )
    validation_chunk_rows: int = Field(
        default=250_000,
        ge=1,
        description="Rows per batch when Great Expectations validates an artifact; bounds "
        "validation memory (vectors are reduced to norms in SQL, never loaded whole).",
    )

    # --- serving -------------------------------------------------------------------------
    serve_host: str = Field(default="127.0.0.1", description="Bind address of `serve`.")
    serve_port: int = Field(default=8181, ge=1, le=65535, description="TCP port of `serve`.")
    serve_token: str | None = Field(
        default=None,
        description="If set, every route but the health probes needs "
        "`Authorization: Bearer <token>`.",
    )
    cursor_secret: str | None = Field(
        default=None,
        description="HMAC key that signs pagination cursors. Default: one kept in "
        "HOME/cursor.key (mode 0600), so that a cursor outlives the process that printed it "
        "(`search`, `thread`, `serve` share it); a random key per process where the home "
        "cannot hold it.",
    )
    search_max_results: int = Field(
        default=50,
        ge=12,
        le=500,
        description="Most results one search call may return (`limit`); at least 12, so the "
        "defaults of `limit` (10) and `max_evidence` (12) always fit.",
    )
    search_max_filter_values: int = Field(
        default=100, ge=1, description="Most values one search filter list may hold."
    )
    search_max_query_chars: int = Field(
        default=2000, ge=1, description="Longest query text accepted, in characters."
    )
    search_max_query_tokens: int = Field(
        default=64, ge=1, description="Query tokens kept for BM25; the rest are dropped."
    )
    search_candidate_window: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="Candidates each retrieval arm contributes to hybrid fusion; pagination "
        "reaches at most the fused candidates of this window.",
    )
    # Calibrated with `slackquery eval --answers` on every judged set pooled (docs/evaluation.md,
    # "Answer path"): Beacon dev, the sample's and the generated set's questions (359
    # answerable, 25 unanswerable); 0.15 maximises pooled answer rate + correct abstention.
    answer_min_coverage: float = Field(
        default=0.15,
        ge=0.0,
        le=1.0,
        description="Least share of a question part's content words (weighted by rarity) one "
        "retrieved message must hold for `ask`/answer_slack_question to answer that part; "
        "below it the part is unsupported, and a question with no supported part abstains.",
    )
    serve_max_text_chars: int = Field(
        default=4000,
        ge=200,
        description="Message text longer than this is cut, with a marker, in tool responses.",
    )
    serve_max_response_chars: int = Field(
        default=32_000,
        ge=8_000,
        description="Most characters of JSON the records of one tool response take (search "
        "hits, a thread's messages, channels, a message's neighbours, an answer's evidence, a "
        "draft's citation checks): a page that would pass it ends early, with `next_cursor` (a "
        "message's farthest neighbours and an answer's uncited evidence are left out; a draft "
        "with more checks is unverified, with the first listed). "
        "MCP clients cap what a tool may return (some at 25,000 tokens), and each response "
        "goes out twice, as structured content and as its compact JSON text. The CLI has no "
        "such cap.",
    )
    serve_max_request_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        description="Largest HTTP request body `serve` accepts, streamed bodies included.",
    )
    serve_request_budget_s: float = Field(
        default=10.0,
        gt=0,
        description="Time one tool call may take, queueing included; past it the call ends "
        "with an error at the next retrieval stage instead of running on.",
    )
    serve_max_in_flight: int = Field(
        default=16,
        ge=1,
        le=40,
        description="Tool calls one server runs at once (at most the 40 worker threads); "
        "further calls get a `busy` error at once instead of waiting in a queue.",
    )
    search_max_query_parts: int = Field(
        default=8,
        ge=2,
        description="Most parts of a multi-part question that `ask` (and hybrid search with "
        "the question-part arm on) handles on their own; later parts are dropped, with a note "
        "(`ask` names each as not answered, so its verdict is at most `partial`).",
    )

    @field_validator("home")
    @classmethod
    def _folder(cls, value: Path) -> Path:
        """A folder, or a path where one can be made: every command keeps its files there."""
        if value.exists() and not value.is_dir():
            raise ValueError("expected a folder, not a file")
        return value

    @field_validator("slack_token")
    @classmethod
    def _header_safe_token(cls, value: SecretStr | None) -> SecretStr | None:
        """Printable ASCII without spaces: the token travels in an HTTP header, where a
        newline or space fails every request as a transport error that looks temporary
        (retried for minutes), and anything else non-ASCII cannot be encoded at all.

        Raises SlackqueryError, not ValueError: pydantic's error for a ValueError carries
        the input, which the CLI's line for a bad setting quotes, and a token is never shown.
        """
        token = "" if value is None else value.get_secret_value()
        if all(char.isascii() and char.isprintable() and not char.isspace() for char in token):
            return value
        raise SlackqueryError(
            "invalid setting: SLACKQUERY_SLACK_TOKEN holds spaces, line breaks or other "
            "characters no Slack token has (a newline from the file it was read from?); "
            "set it to the token alone"
        )

    @field_validator("slack_requests_per_minute")
    @classmethod
    def _pacing_preset(cls, value: str) -> str:
        """A preset name, 0 (unpaced) or a finite number of requests per minute from
        SLACK_MIN_REQUESTS_PER_MINUTE."""
        if value in ("tiers", "non-marketplace"):
            return value
        try:
            rate = float(value)
        except ValueError:
            rate = math.nan
        if rate == 0 or (math.isfinite(rate) and rate >= SLACK_MIN_REQUESTS_PER_MINUTE):
            return value
        raise ValueError(
            "expected `tiers`, `non-marketplace`, 0 (unpaced) or a number of requests/min "
            f"from {SLACK_MIN_REQUESTS_PER_MINUTE:g}"
        )

    @field_validator("import_memory_limit", "artifact_build_memory_limit")
    @classmethod
    def _memory_size(cls, value: str) -> str:
        """A positive DuckDB memory size (`MEMORY_SIZE`)."""
        size = MEMORY_SIZE.fullmatch(value.strip())
        if size is None or float(size[1]) <= 0:
            raise ValueError("expected a positive size and unit, e.g. `1536MB`, `4GB`, `512MiB`")
        return value.strip()

    @field_validator("slack_api_url", "embedding_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """An http or https URL with a host: anything else fails every request, as a
        transport error that looks temporary and is retried."""
        expected = "expected an http or https URL with a host"
        try:
            parts = urlsplit(value)
            port = parts.port  # parsed here: a port that is not a number 0-65535 raises
        except ValueError as error:
            raise ValueError(f"{expected} ({error})") from None
        blank = any(char.isspace() or not char.isprintable() for char in value)
        if parts.scheme not in ("http", "https") or not parts.hostname or blank or port == 0:
            raise ValueError(expected)
        return value

    @property
    def canonical_path(self) -> Path:
        """Resolved canonical database path."""
        return self.canonical_db or self.home / "canonical.duckdb"

    @property
    def state_path(self) -> Path:
        """Resolved state database path."""
        return self.state_db or self.home / "state.duckdb"

    @property
    def artifact_path(self) -> Path:
        """Resolved artifact directory."""
        return self.artifact_dir or self.home / "artifacts"

    @property
    def log_path(self) -> Path:
        """Resolved log directory."""
        return self.log_dir or self.home / "logs"

    @property
    def model_cache_path(self) -> Path:
        """Resolved folder of what is derived from the packaged model's weights."""
        return self.model_cache_dir or self.home / "cache" / "models"


def get_settings() -> Settings:
    """Settings from the current environment (read fresh each call, so tests can set env)."""
    return Settings()
