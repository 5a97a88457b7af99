"""The stages after fusion: each takes the query context and the fused hits, returns hits.

`STAGES` runs in order on every search whose mode a stage lists: the reranker the fusion
config names (`RERANK_STAGES`; none by default), the answer-type cue, then ranking down
messages that ask when the query asks. A cross-encoder drops in as one more entry of
`RERANK_STAGES` with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from serving.context import QueryContext
from serving.query import answer_types, asks_a_question, asks_person, holds_answer_type
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
    """Boost the best hits that state the kind of answer the question asks for: a time,
    number or place, or for "who", a person of the workspace by name."""
    kinds, person = answer_types(ctx.text), asks_person(ctx.text)
    if not (kinds or person) or not ctx.fusion.answer_cue_boost:
        return hits
    texts = [ctx.display_text(hit.row) for hit in hits[:ANSWER_CUE_DEPTH]]
    cued = [
        holds_answer_type(text, kinds)
        or (person and ctx.artifact.authors_named_in(text, ctx.visible).size > 0)
        for text in texts
    ]
    stated = [f"state a {kind}" for kind in kinds] + (["name a person"] if person else [])
    ctx.notes.append("ranked up messages that " + " / ".join(stated))
    return boost_answer_cues(hits, cued, ctx.fusion.answer_cue_boost)


def question_stage(ctx: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
    """For a question, divide by `1 + answer_cue_boost` the fused score of the best hits that
    ask a question themselves, and re-rank (ties by row). In a thread the message that asks
    repeats the question's words and ranks first; the reply that answers it often does not
    (the same boost, the other way)."""
    boost = ctx.fusion.answer_cue_boost
    if not boost or not asks_a_question(ctx.text):
        return hits
    head = [
        hit._replace(fused_score=hit.fused_score / (1.0 + boost))
        if asks_a_question(ctx.display_text(hit.row))
        else hit
        for hit in hits[:ANSWER_CUE_DEPTH]
    ]
    return sorted(head + hits[ANSWER_CUE_DEPTH:], key=lambda hit: (-hit.fused_score, hit.row))


def combine_scores(hits: list[FusedHit], weights: dict[str, float]) -> list[FusedHit]:
    """Re-rank by the weighted sum of each arm's min-max normalised score (ties by row).

    Rank fusion keeps only each arm's order, so an exact identifier match far ahead on BM25
    counts as much as a near-tie. A convex combination of normalised scores (the fusion
    research compares it with RRF: Bruch et al., "An Analysis of Fusion Functions for Hybrid
    Retrieval", 2023) keeps the gaps. Each arm is normalised over the fused hits that it
    ranked, so its best hit scores 1 and its worst 0; a hit the arm did not rank gets 0
    from it. The weights are the route's fusion weights, untuned.
    """
    if not hits:
        return hits
    combined = np.zeros(len(hits))
    for arm in {arm for hit in hits for arm in hit.scores}:
        scored = [(index, hit.scores[arm]) for index, hit in enumerate(hits) if arm in hit.scores]
        values = np.array([score for _, score in scored], dtype=np.float64)
        spread = float(values.max() - values.min())
        normalised = (values - values.min()) / spread if spread > 0 else np.ones(values.size)
        combined[[index for index, _ in scored]] += weights.get(arm, 0.0) * normalised
    order = sorted(range(len(hits)), key=lambda index: (-combined[index], hits[index].row))
    return [FusedHit(hits[i].row, float(combined[i]), hits[i].ranks, hits[i].scores) for i in order]


def score_rerank_stage(ctx: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
    """The fused hits re-ranked by their arms' normalised scores (`combine_scores`)."""
    return combine_scores(hits, ctx.fusion.weights(ctx.route))


# The fusion config's `rerank` name -> its stage (serving.fusion.RERANKERS lists the names).
RERANK_STAGES = {"scores": score_rerank_stage}


def rerank_stage(ctx: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
    """The reranker the fusion config names, or the hits unchanged for `none`."""
    stage = RERANK_STAGES.get(ctx.fusion.rerank)
    return hits if stage is None else stage(ctx, hits)


STAGES: tuple[Stage, ...] = (
    Stage("rerank", rerank_stage),
    Stage("answer_cues", answer_cue_stage),
    Stage("questions", question_stage),
)
