"""Paired comparison of answer-path runs: ratios resampled as ratios, queries paired."""

from typing import Any

import pytest

from slackquery.errors import SlackqueryError
from slackquery.evaluation.answer_compare import compare_answers
from slackquery.evaluation.compare import POOLED


def row(query_id: str, cited: int, hits: int, *, answerable: bool = True) -> dict[str, Any]:
    verdict = "answered" if cited else "insufficient_evidence"
    return {
        "id": query_id,
        "answerable": answerable,
        "verdict": verdict,
        "cited": [f"m{i}" for i in range(cited)],
        "verified": True,
        "strict_hits": hits,
        "lenient_hits": hits,
        "groups": 1,
        "groups_cited": min(hits, 1),
    }


def test_precision_is_a_ratio_of_sums_not_a_mean_of_ratios() -> None:
    # A: 1 of 1 and 1 of 3 cited messages are evidence: pooled 2 / 4 = 0.5 (mean of
    # ratios 0.667). B: 1 of 1 and 1 of 1: 1.0.
    a = [row("q1", 1, 1), row("q2", 3, 1)]
    b = [row("q1", 1, 1), row("q2", 1, 1)]
    result = compare_answers("A", "B", {"set": (a, b)})
    strict = result.intervals["set"]["strict_precision"]
    assert strict.mean == pytest.approx(0.5) and strict.queries == 2
    assert result.intervals["set"]["part_coverage"].mean == 0.0
    assert [query["id"] for _, query, _ in result.changed] == ["q2"]


def test_identical_runs_differ_by_nothing_and_pool_every_set() -> None:
    runs = {
        "dev": ([row("q1", 2, 1), row("u1", 0, 0, answerable=False)],) * 2,
        "sample": ([row("q1", 1, 0)],) * 2,
    }
    result = compare_answers("A", "B", runs)
    assert set(result.intervals) == {"dev", "sample", POOLED}
    for figures in result.intervals.values():
        assert all(f.mean == f.low == f.high == 0 for f in figures.values())
    assert result.intervals[POOLED]["answer_rate"].queries == 2
    assert result.intervals[POOLED]["correct_abstention"].queries == 1
    assert "correct_abstention" not in result.intervals["sample"]  # it has no unanswerable query
    assert result.changed == ()


def test_runs_over_different_queries_are_not_paired() -> None:
    with pytest.raises(SlackqueryError, match="judge different queries"):
        compare_answers("A", "B", {"set": ([row("q1", 1, 1)], [row("q2", 1, 1)])})
