"""Weighted reciprocal-rank fusion of the retrieval arms.

Fusion works on ranks, not scores, so BM25 and cosine never need a common scale:
`fused(d) = sum over arms of weight_arm / (rrf_k + rank_arm(d))`, ranks from 1. The route
(exact / conceptual / mixed) only changes the weights. Weights and defaults come from the
original design (reference/original-design.md §1.c); the evaluation harness passes its
own `FusionConfig` to `SearchEngine.search` to run parameter grids through this code.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

ARMS = ("lexical", "semantic", "context")

DEFAULT_ROUTE_WEIGHTS: dict[str, dict[str, float]] = {
    "exact": {"lexical": 1.8, "semantic": 0.5, "context": 0.65},
    "conceptual": {"lexical": 0.7, "semantic": 1.5, "context": 0.65},
    "mixed": {"lexical": 1.0, "semantic": 1.0, "context": 0.65},
}


@dataclass(frozen=True)
class FusionConfig:
    """Every knob of hybrid ranking. `route_aware=False` always uses the `mixed` weights."""

    rrf_k: float = 60.0
    candidate_window: int = 100
    route_weights: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: {route: dict(w) for route, w in DEFAULT_ROUTE_WEIGHTS.items()}
    )
    use_context_arm: bool = True
    route_aware: bool = True
    max_per_thread: int = 3

    def weights(self, route: str) -> dict[str, float]:
        """The arm weights used for a query of this route."""
        return dict(self.route_weights["mixed" if not self.route_aware else route])


@dataclass(frozen=True)
class ArmRanking:
    """One arm's ranked candidates: row indices (best first) and their raw scores."""

    rows: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class FusedHit:
    """A fused candidate with each arm's 1-based rank and score (None when absent)."""

    row: int
    fused_score: float
    ranks: dict[str, int]
    scores: dict[str, float]


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
    fused: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    scores: dict[int, dict[str, float]] = {}
    for arm in sorted(arms):
        ranking = arms[arm]
        weight = float(weights.get(arm, 0.0))
        for position, (row, score) in enumerate(
            zip(ranking.rows.tolist(), ranking.scores.tolist(), strict=True), start=1
        ):
            fused[row] = fused.get(row, 0.0) + weight / (rrf_k + position)
            ranks.setdefault(row, {})[arm] = position
            scores.setdefault(row, {})[arm] = score
    order = sorted(fused, key=lambda row: (-fused[row], row))
    per_thread: dict[int, int] = {}
    hits: list[FusedHit] = []
    for row in order:
        key = int(thread_keys[row])
        if per_thread.get(key, 0) >= max_per_thread:
            continue
        per_thread[key] = per_thread.get(key, 0) + 1
        hits.append(FusedHit(row, fused[row], ranks[row], scores[row]))
    return hits


def top_rows(scores: np.ndarray, eligible: np.ndarray, window: int) -> ArmRanking:
    """The `window` best eligible rows by descending score, ties by ascending row index."""
    candidates = np.flatnonzero(eligible)
    if candidates.size == 0:
        return ArmRanking(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
    values = scores[candidates]
    if candidates.size > window:
        # Keep everything tied with the window's last score so the id tie-break stays exact.
        cut = np.partition(values, candidates.size - window)[candidates.size - window]
        keep = values >= cut
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:window]
    return ArmRanking(candidates[order], values[order])
