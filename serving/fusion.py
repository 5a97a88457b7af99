"""Weighted reciprocal-rank fusion of the retrieval arms.

Fusion works on ranks, not scores, so BM25 and cosine never need a common scale:
`fused(d) = sum over arms of weight_arm / (rrf_k + rank_arm(d))`, ranks from 1. The route
(exact / conceptual / mixed) only changes the weights. The starting point was the original
design (reference/original-design.md §1.c); `rrf_k`, the conceptual weights and the context
target were then changed from measurements on Beacon dev (docs/evaluation.md, "Results").
The evaluation harness passes its own `FusionConfig` to `SearchEngine.search` to run
parameter grids through this code.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

ARMS = ("lexical", "semantic", "context", "aspects", "authors")

# Weights per route (lexical / semantic / context / aspects / authors). `exact`, `mixed`: the
# original design's lexical, semantic and context weights. `conceptual` (natural-language
# questions, most of what people and agents ask): the semantic arm, run with the default
# e5 + MiniLM pair, is by far the strongest arm on such questions (Beacon dev Recall@10 0.875
# against lexical 0.637; sample 0.867 against 0.733), so the other arms are tie-breakers
# there: BM25 over messages and over thread context 0.25 each, the question-part arm (the
# semantic arm run per part of a multi-part question, present only for such questions) 0.5,
# the author hint (messages by people the question names, by cosine; never a filter) 0.25.
# On the other routes the part arm carries the semantic weight and the author hint 0.5.
# Measured on both query sets: docs/evaluation.md.
DEFAULT_ROUTE_WEIGHTS: dict[str, dict[str, float]] = {
    "exact": {"lexical": 1.8, "semantic": 0.5, "context": 0.65, "aspects": 0.5, "authors": 0.5},
    "conceptual": {
        "lexical": 0.25,
        "semantic": 1.5,
        "context": 0.25,
        "aspects": 0.5,
        "authors": 0.25,
    },
    "mixed": {"lexical": 1.0, "semantic": 1.0, "context": 0.65, "aspects": 1.0, "authors": 0.5},
}
# How a thread-context hit becomes a message for fusion (see `SearchEngine._context_arm`).
CONTEXT_TARGETS = ("best", "root", "thread")


@dataclass(frozen=True)
class FusionConfig:
    """Every knob of hybrid ranking. `route_aware=False` always uses the `mixed` weights.

    Defaults are measured (docs/evaluation.md, Beacon dev): `rrf_k=20` instead of the usual
    60 lets an arm's top hits outrank documents that sit mid-list in every arm;
    `context_target="best"` hands a matching thread's vote to its message most similar
    to the query instead of always to the root; `use_aspect_arm` adds the per-part semantic
    arm for multi-part questions (`serving.query.query_aspects`); `use_author_arm` adds the
    arm of messages by people the question names (`LoadedArtifact.authors_named_in`);
    `answer_cue_boost` multiplies the fused score of a message that holds the kind of answer
    the question asks for (`boost_answer_cues`); 0 turns it off.
    """

    rrf_k: float = 20.0
    candidate_window: int = 100
    route_weights: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: {route: dict(w) for route, w in DEFAULT_ROUTE_WEIGHTS.items()}
    )
    use_context_arm: bool = True
    use_aspect_arm: bool = True
    use_author_arm: bool = True
    route_aware: bool = True
    max_per_thread: int = 3
    context_target: str = "best"
    answer_cue_boost: float = 0.25

    def __post_init__(self) -> None:
        if self.answer_cue_boost < 0:
            raise ValueError(f"answer_cue_boost must be >= 0, got {self.answer_cue_boost!r}")
        if self.context_target not in CONTEXT_TARGETS:
            raise ValueError(
                f"context_target must be one of {', '.join(CONTEXT_TARGETS)}, "
                f"got {self.context_target!r}"
            )

    def weights(self, route: str) -> dict[str, float]:
        """The arm weights used for a query of this route."""
        return dict(self.route_weights["mixed" if not self.route_aware else route])


@dataclass(frozen=True)
class ArmRanking:
    """One arm's ranked candidates: row indices (best first) and their raw scores.

    `ranks` (1-based, non-decreasing) lets several rows share a rank, as the messages of one
    thread-context hit do; None means positions 1..n.
    """

    rows: np.ndarray
    scores: np.ndarray
    ranks: np.ndarray | None = None

    def rank_values(self) -> np.ndarray:
        """The 1-based rank of every row."""
        if self.ranks is None:
            return np.arange(1, self.rows.size + 1, dtype=np.int64)
        return np.asarray(self.ranks, dtype=np.int64)


@dataclass(frozen=True)
class FusedHit:
    """A fused candidate with each arm's 1-based rank and score (None when absent)."""

    row: int
    fused_score: float
    ranks: dict[str, int]
    scores: dict[str, float]
    answer_cue: bool = False


def fuse(
    arms: Mapping[str, ArmRanking],
    weights: Mapping[str, float],
    *,
    rrf_k: float,
    thread_keys: np.ndarray,
    max_per_thread: int,
) -> list[FusedHit]:
    """Fuse arm rankings; ties break on row index, which is document-id order in the artifact.

    `thread_keys[row]` groups rows of one thread (a row's own index when not threaded);
    at most `max_per_thread` hits per group survive, so one busy thread cannot fill a page.
    """
    names = sorted(arms)
    if not any(arms[arm].rows.size for arm in names):
        return []
    # Each arm's contribution per candidate, arms in name order; bincount then adds them
    # per row in exactly that order, so fused scores equal a plain running sum.
    rows = np.concatenate([np.asarray(arms[arm].rows, dtype=np.int64) for arm in names])
    contributions = np.concatenate(
        [
            float(weights.get(arm, 0.0)) / (rrf_k + arms[arm].rank_values().astype(np.float64))
            for arm in names
        ]
    )
    candidates, slot = np.unique(rows, return_inverse=True)
    fused = np.bincount(slot.reshape(-1), weights=contributions, minlength=candidates.size)
    order = np.lexsort((candidates, -fused))
    ordered_rows = candidates[order]
    # Per-thread cap: a hit's rank inside its thread group, in fused order.
    keys = np.asarray(thread_keys)[ordered_rows]
    by_key = np.argsort(keys, kind="stable")
    sorted_keys = keys[by_key]
    index = np.arange(keys.size)
    group_start = np.ones(keys.size, dtype=bool)
    group_start[1:] = sorted_keys[1:] != sorted_keys[:-1]
    rank_in_group = np.empty(keys.size, dtype=np.int64)
    rank_in_group[by_key] = index - np.maximum.accumulate(np.where(group_start, index, 0))
    kept = order[rank_in_group < max_per_thread]
    signals = {
        arm: {
            row: (position, score)
            for row, position, score in zip(
                arms[arm].rows.tolist(),
                arms[arm].rank_values().tolist(),
                arms[arm].scores.tolist(),
                strict=True,
            )
        }
        for arm in names
    }
    hits: list[FusedHit] = []
    for row, score in zip(candidates[kept].tolist(), fused[kept].tolist(), strict=True):
        ranks: dict[str, int] = {}
        arm_scores: dict[str, float] = {}
        for arm in names:
            found = signals[arm].get(row)
            if found is not None:
                ranks[arm], arm_scores[arm] = found
        hits.append(FusedHit(row, score, ranks, arm_scores))
    return hits


# Only the best hits are checked for an answer cue (a regex pass over each text): a boost of
# at most 1 + boost cannot lift a hit from below this depth onto a results page (limit <= 50).
ANSWER_CUE_DEPTH = 50


def boost_answer_cues(hits: list[FusedHit], cued: list[bool], boost: float) -> list[FusedHit]:
    """Multiply the fused score of cued hits by `1 + boost` and re-rank them (ties by row).

    `cued[i]` says whether `hits[i]` holds the kind of answer the question asks for (a date
    for "when", a number for "how many": `serving.query.answer_types`); it covers the first
    `len(cued)` hits, and those are re-ranked while the rest keep their order below them
    (boosting never lowers a score, so the whole list stays in fused-score order). Rank
    fusion cannot see answer types, and the arms often put a message that only talks about
    the topic ("can someone own the review?") just above the one that answers it ("Leo owns
    the review by 2026-09-03"). A bounded boost reorders such near-ties and leaves clear
    gaps alone. Measured on both query sets: docs/evaluation.md, round 4.
    """
    head = [
        FusedHit(hit.row, hit.fused_score * (1.0 + boost), hit.ranks, hit.scores, True)
        if is_cued
        else hit
        for hit, is_cued in zip(hits, cued, strict=False)
    ]
    return sorted(head, key=lambda hit: (-hit.fused_score, hit.row)) + hits[len(cued) :]


def top_rows(scores: np.ndarray, eligible: np.ndarray, window: int) -> ArmRanking:
    """The `window` best eligible rows by descending score, ties by ascending row index."""
    candidates = np.flatnonzero(eligible)
    return top_candidates(candidates, scores[candidates], window)


def top_candidates(candidates: np.ndarray, values: np.ndarray, window: int) -> ArmRanking:
    """The `window` best of these (row, score) pairs by descending score, ties by row index.

    Rows must be distinct; their order does not matter.
    """
    if candidates.size == 0:
        return ArmRanking(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
    if candidates.size > window:
        # Keep everything tied with the window's last score so the id tie-break stays exact.
        cut = np.partition(values, candidates.size - window)[candidates.size - window]
        keep = values >= cut
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:window]
    return ArmRanking(candidates[order], values[order])
