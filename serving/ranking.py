"""Ranking primitives shared by the arms, fusion and the stages after it."""

from dataclasses import dataclass

import numpy as np


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
