"""Request and result types: the structured output of every MCP tool and of `search --json`.

Field descriptions end up in the tools' output schemas, which agents read, so each one
says what the value means and how to use it.
"""

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, create_model

from serving.arms import ARMS, Arm

Mode = Literal["hybrid", "lexical", "semantic"]


class SearchRequest(BaseModel):
    """One search call, exactly the `search_slack` arguments."""

    query: str
    mode: Mode = "hybrid"
    workspace_ids: list[str] | None = None
    channel_ids: list[str] | None = None
    author_ids: list[str] | None = None
    conversation_types: list[str] | None = None
    start_ts_us: int | None = None
    end_ts_us: int | None = None
    limit: int = 10
    cursor: str | None = None


class ArmSignal(BaseModel):
    """One retrieval arm's view of a hit."""

    rank: int = Field(description="1-based rank within this arm's candidates.")
    score: float = Field(description="The arm's raw score (BM25 or cosine); a ranking signal.")


class AttachedFile(BaseModel):
    """A file attached to a message, as Slack names it (the file itself is not archived)."""

    file_id: str
    name: str | None = Field(description="File name, e.g. `runbook.pdf`.")
    title: str | None = Field(description="The title shown in Slack.")
    mimetype: str | None


FILES_DESCRIPTION = (
    "Files attached to the message, in file id order (empty when none); search matches "
    "their names and titles."
)


class SearchHitBase(BaseModel):
    """One matching Slack message; `hit_model` adds one signal field per retrieval arm."""

    document_id: str = Field(description="Stable id (`W:C:ts`); pass to get_slack_message.")
    source_message_id: str | None = Field(description="The message's id in its source export.")
    workspace_id: str
    workspace_name: str | None
    channel_id: str
    channel_name: str | None
    conversation_type: str | None
    author_id: str | None
    author_name: str | None
    ts_us: int = Field(description="Posting time, microseconds since the epoch (UTC).")
    timestamp: str = Field(description="Posting time, ISO 8601 UTC.")
    thread_id: str | None = Field(description="Thread id for get_slack_thread, if threaded.")
    thread_root_id: str | None
    text: str = Field(description="Message text (cut with a marker when very long).")
    text_truncated: bool
    permalink: str | None = Field(description="Slack link to cite.")
    files: list[AttachedFile] = Field(default_factory=list, description=FILES_DESCRIPTION)
    fused_score: float = Field(
        description="Weighted RRF score (times 1 + the answer-cue boost when `answer_cue`; "
        "divided by it when a question's hit asks a question itself); relative, not a "
        "probability."
    )
    answer_cue: bool = Field(
        default=False,
        description="States the kind of answer the question asks for (a date or time for "
        "'when', a number for 'how many', a link, path or channel for 'where', a member's "
        "name for 'who'); hybrid ranking boosted its fused score.",
    )

    @property
    def replies_to(self) -> str | None:
        """The document id of its thread's first message when this hit is a reply in it."""
        return self.thread_root_id if self.thread_root_id != self.document_id else None


def _with_signals(base: type[SearchHitBase], arms: tuple[Arm, ...]) -> type[SearchHitBase]:
    """`base` plus one optional `ArmSignal` field per arm it does not have yet."""
    signals: dict[str, Any] = {
        arm.name: (ArmSignal | None, Field(default=None, description=arm.signal))
        for arm in arms
        if arm.name not in base.model_fields
    }
    return create_model(
        "SearchHit", __base__=base, __doc__="One matching Slack message.", **signals
    )


SearchHit = _with_signals(SearchHitBase, ARMS)


def hit_model(arms: tuple[Arm, ...]) -> type[SearchHitBase]:
    """The search-hit model for a registry: `SearchHit` (the tools' output schema) for the
    default one, else a subclass of it with the extra arms' signals, so hits serialise them."""
    return SearchHit if arms == ARMS else _with_signals(SearchHit, arms)


class SearchResponse(BaseModel):
    """A page of results and how they were produced."""

    query: str = Field(description="Free text searched, after Slack operators were taken out.")
    mode: Mode
    route: str = Field(
        description="exact, conceptual or mixed: which arm weights were used; newest: the "
        "query was operators only, so the messages its filters keep are listed newest first."
    )
    weights: dict[str, float] = Field(description="Arm weights used in fusion.")
    filters: dict[str, object] = Field(description="Filters applied, names resolved to ids.")
    artifact_id: str
    generation_id: str
    results: list[SerializeAsAny[SearchHit]]
    offset: int = Field(
        default=0,
        description="How many results come before this page's first (0 on the first page).",
    )
    next_cursor: str | None = Field(
        description="Pass back as `cursor` (same query and filters) for the next page; "
        "null when there are no more results."
    )
    notes: list[str] = Field(
        description="Warnings: dropped tokens, unknown terms, caps hit, partial vector coverage."
    )
    vector_coverage: float | None = Field(
        default=None,
        description="Share of the messages you may see (0-1) that have a vector, so semantic "
        "ranking can find them (semantic and hybrid modes; null for lexical, which searches every "
        "message). Below 1, embedding is still running: the rest are found by words only.",
    )
    timings_ms: dict[str, float]


class MessageRecord(BaseModel):
    """One Slack message as stored in the artifact."""

    document_id: str
    source_message_id: str | None
    workspace_id: str
    workspace_name: str | None
    channel_id: str
    channel_name: str | None
    conversation_type: str | None
    author_id: str | None
    author_name: str | None
    ts_us: int
    timestamp: str
    thread_id: str | None
    thread_root_id: str | None
    is_thread_parent: bool | None
    is_thread_reply: bool | None
    text: str
    text_truncated: bool
    permalink: str | None
    files: list[AttachedFile] = Field(default_factory=list, description=FILES_DESCRIPTION)
    is_target: bool = Field(
        default=False, description="True for the requested message among its neighbours."
    )


class MessageResponse(BaseModel):
    """A message and its neighbours in time order (a reply's in its thread, else the channel's
    messages outside threads and the replies also sent to the channel)."""

    messages: list[MessageRecord]
    artifact_id: str
    notes: list[str] = Field(
        default_factory=list,
        description="Warnings: neighbours left out to keep the response within its size.",
    )


class ThreadResponse(BaseModel):
    """A thread's messages in time order."""

    thread_id: str
    messages: list[MessageRecord]
    offset: int = Field(description="How many of the thread's messages come before this page.")
    truncated: bool = Field(description="True when more of the thread follows this page.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` (same thread) for the messages after this page."
    )
    artifact_id: str
    notes: list[str] = Field(
        default_factory=list,
        description="Warnings: a message with no replies, shown as a thread of its own.",
    )


class ScopeRecord(BaseModel):
    """A channel (or DM) with its workspace, message count and time span."""

    workspace_id: str
    workspace_slug: str | None
    workspace_name: str | None
    channel_id: str
    channel_name: str | None
    conversation_type: str | None
    message_count: int
    first_ts_us: int | None
    last_ts_us: int | None
    first_timestamp: str | None = Field(description="First message's time, ISO 8601 UTC.")
    last_timestamp: str | None = Field(description="Last message's time, ISO 8601 UTC.")


class ScopesResponse(BaseModel):
    """Channels matching the scope filters, ordered by workspace slug and channel name."""

    scopes: list[ScopeRecord]
    offset: int = Field(description="How many channels come before this page.")
    truncated: bool = Field(description="True when more channels follow this page.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` (same filters) for the channels after this page."
    )
    artifact_id: str
