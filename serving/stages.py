"""The stages after fusion: each takes the query context and the fused hits, returns hits.

`STAGES` runs in order on every search whose mode a stage lists. Today: the answer-type
cue. A reranker (and later the requester's final visibility check) drops in as one more
`Stage` with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from serving.context import QueryContext
from serving.query import answer_types, holds_answer_type
from serving.ranking import FusedHit

# Only the best hits are checked for an answer cue (a regex pass over each text): a boost of
# at most 1 + boost cannot lift a hit from below this depth onto a results page (limit <= 50).
ANSWER_CUE_DEPTH = 50


@dataclass(frozen=True, eq=False)
class Stage:
    """One step after fusion, and the search modes it applies to."""

    name: str
    apply: Callable[[QueryContext, list[FusedHit]], list[FusedHit]]
    modes: tuple[str, ...] = ("hybrid",)


def boost_answer_cues(hits: list[FusedHit], cued: list[bool], boost: float) -> list[FusedHit]:
    """Multiply the fused score of cued hits by `1 + boost` and re-rank them (ties by row).

    `cued[i]` says whether `hits[i]` holds the kind of answer the question asks for (a date
    for "when", a number for "how many": `serving.query.answer_types`); it covers the first
    `len(cued)` hits, and those are re-ranked while the rest keep their order below them
    (boosting never lowers a score, so the whole list stays in fused-score order). Rank
    fusion cannot see answer types, and the arms often put a message that only talks about
    the topic ("can someone own the review?") just above the one that answers it ("Leo owns
    the review by 2026-09-03"). A bounded boost reorders such near-ties and leaves clear
    gaps alone.
    """
    head = [
        FusedHit(hit.row, hit.fused_score * (1.0 + boost), hit.ranks, hit.scores, True)
        if is_cued
        else hit
        for hit, is_cued in zip(hits, cued, strict=False)
    ]
    return sorted(head, key=lambda hit: (-hit.fused_score, hit.row)) + hits[len(cued) :]


def answer_cue_stage(ctx: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
    """Boost the best hits that state the kind of answer the question asks for."""
    kinds = answer_types(ctx.text)
    if not kinds or not ctx.fusion.answer_cue_boost:
        return hits
    cued = [
        holds_answer_type(str(ctx.artifact.display_row(hit.row)["text_display"]), kinds)
        for hit in hits[:ANSWER_CUE_DEPTH]
    ]
    ctx.notes.append("ranked up messages that state a " + " / ".join(kinds))
    return boost_answer_cues(hits, cued, ctx.fusion.answer_cue_boost)


STAGES: tuple[Stage, ...] = (Stage("answer_cues", answer_cue_stage),)
