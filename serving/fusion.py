"""Weighted reciprocal-rank fusion of the retrieval arms, and every knob of hybrid ranking.

Fusion works on ranks, not scores, so BM25 and cosine never need a common scale:
`fused(d) = sum over arms of weight_arm / (rrf_k + rank_arm(d))`, ranks from 1. The route
(exact / conceptual / mixed) only changes the weights, whose defaults each arm declares in
the registry (serving/arms.py). The evaluation harness passes its own `FusionConfig` to
`SearchEngine.search` to run parameter grids through this code.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from serving.arms import ARMS, CONTEXT_TARGETS, ROUTES, Arm
from serving.ranking import ArmRanking, FusedHit

# What may re-rank the fused hits (serving/stages.py): nothing, or the arms' own scores.
# A cross-encoder would be one more name here and one more function there.
RERANKERS = ("none", "scores")


def default_route_weights(arms: tuple[Arm, ...] = ARMS) -> dict[str, dict[str, float]]:
    """Every route's weight for every registered arm, as the registry declares them."""
    return {route: {arm.name: arm.weights[route] for arm in arms} for route in ROUTES}


@dataclass(frozen=True)
class FusionConfig:
    """Every knob of hybrid ranking. `route_aware=False` always uses the `mixed` weights.

    `disabled_arms` names registered arms that do not run; `context_target` says which
    message of a matching thread gets the context arm's vote (serving.arms.thread_votes);
    `answer_cue_boost` multiplies the fused score of a message that holds the kind of answer
    the question asks for (serving.stages); 0 turns it off; `rerank` names the stage that
    re-ranks the fused hits before that (serving.stages.RERANK_STAGES);
    `root_field_weight` weighs a reply's root's words in the lexical arm's score
    (serving.arms.with_root_field), 0 turns it off. Why each default:
    docs/evaluation.md.
    """

    rrf_k: float = 20.0
    candidate_window: int = 50
    route_weights: Mapping[str, Mapping[str, float]] = field(default_factory=default_route_weights)
    # Off by default: the thread-context, question-part and named-author arms did not beat
    # plain fusion of lexical and semantic on the pooled judged sets (docs/evaluation.md,
    # round 5); they stay registered, so a grid can switch them on (`arm.<name>=on`).
    disabled_arms: frozenset[str] = frozenset({"context", "aspects", "authors"})
    route_aware: bool = True
    max_per_thread: int = 3
    context_target: str = "best"
    answer_cue_boost: float = 0.5
    rerank: str = "none"
    root_field_weight: float = 0.25

    def __post_init__(self) -> None:
        if self.rerank not in RERANKERS:
            raise ValueError(f"rerank must be one of {', '.join(RERANKERS)}, got {self.rerank!r}")
        if self.answer_cue_boost < 0:
            raise ValueError(f"answer_cue_boost must be >= 0, got {self.answer_cue_boost!r}")
        if self.root_field_weight < 0:
            raise ValueError(f"root_field_weight must be >= 0, got {self.root_field_weight!r}")
        if self.context_target not in CONTEXT_TARGETS:
            raise ValueError(
                f"context_target must be one of {', '.join(CONTEXT_TARGETS)}, "
                f"got {self.context_target!r}"
            )

    def weights(self, route: str, arms: tuple[Arm, ...] = ARMS) -> dict[str, float]:
        """Each arm's weight for a query of this route (an arm's default where not set)."""
        route = route if self.route_aware else "mixed"
        chosen = self.route_weights.get(route, {})
        return {arm.name: float(chosen.get(arm.name, arm.weights[route])) for arm in arms}


def fuse(
    arms: Mapping[str, ArmRanking],
    weights: Mapping[str, float],
    *,
    rrf_k: float,
    thread_keys: np.ndarray,
    max_per_thread: int,
) -> tuple[list[FusedHit], np.ndarray]:
    """Fuse arm rankings; ties break on row index, which is document-id order in the artifact.

    `thread_keys[row]` groups rows of one thread (a row's own index when not threaded);
    at most `max_per_thread` hits per group survive, so one busy thread cannot fill a page.
    Returns the hits and the rows the cap left out, in fused order.
    """
    names = sorted(arms)
    if not any(arms[arm].rows.size for arm in names):
        return [], np.empty(0, dtype=np.int64)
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
    under_cap = rank_in_group < max_per_thread
    kept = order[under_cap]
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
    return hits, candidates[order[~under_cap]]
