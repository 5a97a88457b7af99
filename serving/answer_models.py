"""Structured output of `answer_slack_question` and `verify_citations` (and `ask`/`verify --json`).

Field descriptions end up in the tools' output schemas, which agents read, so each one
says what the value means and how to use it.
"""

from typing import Literal

from pydantic import BaseModel, Field

from serving.models import FILES_DESCRIPTION, AttachedFile

Verdict = Literal["answered", "partial", "insufficient_evidence"]
CitationVerdict = Literal["verified", "unverified"]


class ThreadStart(BaseModel):
    """The first message of a reply's thread: what the reply answers, shown as context."""

    document_id: str
    author_name: str | None
    timestamp: str = Field(description="Posting time, ISO 8601 UTC.")
    text: str = Field(description="Message text (cut with a marker when very long).")
    permalink: str | None


class Evidence(BaseModel):
    """One message that supports a part of the question, with the sentence that answers."""

    document_id: str = Field(description="Stable id (`W:C:ts`); the `[document_id]` to cite.")
    source_message_id: str | None = Field(description="The message's id in its source export.")
    channel_id: str
    channel_name: str | None
    conversation_type: str | None
    author_id: str | None
    author_name: str | None
    ts_us: int = Field(description="Posting time, microseconds since the epoch (UTC).")
    timestamp: str = Field(description="Posting time, ISO 8601 UTC.")
    permalink: str | None = Field(description="Slack link to cite.")
    text: str = Field(description="Message text (cut with a marker when very long).")
    files: list[AttachedFile] = Field(default_factory=list, description=FILES_DESCRIPTION)
    sentence: str = Field(description="The sentence of `text` that answers the part.")
    highlighted: str = Field(description="`text` with the answering sentence in **bold**.")
    coverage: float = Field(
        description="Share of the part's content words (weighted by rarity) the message holds."
    )
    is_correction: bool = Field(
        description="True when this later message corrects an earlier one of the same part."
    )
    in_reply_to: ThreadStart | None = Field(
        default=None,
        description="For a thread reply: its thread's first message, which the reply answers "
        '("45 seconds" reads as an answer only beside "What\'s the upstream timeout?"). '
        "Context, not evidence: cite it only for what it says itself.",
    )


class AnswerPart(BaseModel):
    """One part of the question (the whole question when it asks one thing)."""

    part: str
    supported: bool = Field(description="True when the evidence is strong enough to answer.")
    strength: float = Field(
        description="Best evidence coverage of the part's content words (0-1); the part is "
        "supported when it reaches `threshold`."
    )
    threshold: float
    answer: str = Field(
        description="Extractive answer to this part, `[document_id]` after "
        "every claim; says so when the archive does not answer it."
    )
    conflict: str | None = Field(
        description="Set when messages disagree: which later message corrects which earlier one."
    )
    evidence: list[Evidence]


class Citation(BaseModel):
    """A message the answer cites."""

    document_id: str
    source_message_id: str | None
    permalink: str | None


class AnswerResponse(BaseModel):
    """An evidence pack: the parts, their evidence, a cited extractive answer and a verdict."""

    question: str
    verdict: Verdict = Field(
        description="answered (every part supported), partial (some parts unsupported; see "
        "`unsupported_parts`) or insufficient_evidence (the archive does not answer)."
    )
    answer: str = Field(description="The parts' answers, one line each, every claim cited.")
    unsupported_parts: list[str]
    citations: list[Citation]
    parts: list[AnswerPart]
    artifact_id: str = Field(
        description="Build the evidence came from; pass it to verify_citations as "
        "`cited_at_artifact` to learn whether cited messages changed since."
    )
    notes: list[str]
    timings_ms: dict[str, float]


class CitationCheck(BaseModel):
    """One citation found in a drafted answer and what was checked about it."""

    cited: str = Field(description="The citation as written: `[id]`, permalink or message id.")
    kind: Literal["document_id", "permalink", "source_message_id"]
    document_id: str | None = Field(description="The message it resolves to, if any.")
    exists: bool = Field(description="The message is in the current published artifact.")
    visible: bool = Field(description="The requester may see the message.")
    active: bool = Field(description="The message has not been deleted or emptied since.")
    unchanged: bool | None = Field(
        description="The text equals its text in `cited_at_artifact`; null when no artifact "
        "was named."
    )
    problems: list[str]


class VerificationResponse(BaseModel):
    """Whether every citation of a drafted answer still holds."""

    verdict: CitationVerdict = Field(
        description="verified only when there is at least one citation (or the text says the "
        "evidence is missing) and every citation exists, is visible, active and unchanged."
    )
    citations: list[CitationCheck]
    problems: list[str] = Field(
        description="Why the verdict is unverified: about the text or `cited_at_artifact`, "
        "and how many citations failed their checks (each citation's own `problems` say how)."
    )
    uncited_sentences: list[str] = Field(
        description="Sentences that cite nothing and do not say the evidence is missing (the "
        "first 10, each cut to 300 characters). The verdict judges the citations only: a "
        "claim here is backed by none of them."
    )
    artifact_id: str
    cited_at_artifact: str | None
