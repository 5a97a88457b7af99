"""Metric functions checked against values worked out by hand."""

import math

import pytest

from slackquery.evaluation.metrics import (
    QueryRun,
    dedupe,
    fully_covered,
    groups_covered,
    ndcg_at_k,
    percentile,
    query_row,
    recall_at_k,
    reciprocal_rank,
    summarize,
)
from slackquery.evaluation.queries import EvidenceGroup, JudgedQuery

GROUPS = [("a", "b"), ("c",), ("d", "e")]


def test_recall_counts_groups_not_messages() -> None:
    # a and b are in the same group: two hits, one group. c is at rank 4.
    ranking = ["a", "x", "b", "c", "y", "z"]
    assert groups_covered(GROUPS, ranking, 3) == 1
    assert recall_at_k(GROUPS, ranking, 3) == pytest.approx(1 / 3)
    assert recall_at_k(GROUPS, ranking, 5) == pytest.approx(2 / 3)
    assert not fully_covered(GROUPS, ranking, 20)
    assert fully_covered(GROUPS, [*ranking, "e"], 7)
    assert not fully_covered(GROUPS, [*ranking, "e"], 6)


def test_recall_needs_groups() -> None:
    with pytest.raises(ValueError):
        recall_at_k([], ["a"], 10)


def test_duplicates_do_not_take_two_ranks() -> None:
    assert dedupe(["a", "a", "b", "a", "c"]) == ["a", "b", "c"]
    # Without deduplication c would sit at rank 4, outside the top 3.
    assert recall_at_k(GROUPS, ["x", "x", "x", "c"], 2) == pytest.approx(1 / 3)


def test_reciprocal_rank_is_first_message_of_any_group() -> None:
    assert reciprocal_rank(GROUPS, ["x", "y", "e", "a"], 20) == pytest.approx(1 / 3)
    assert reciprocal_rank(GROUPS, ["a"], 20) == 1.0
    assert reciprocal_rank(GROUPS, ["x", "y", "c"], 2) == 0.0
    assert reciprocal_rank(GROUPS, [], 20) == 0.0


def test_ndcg_with_graded_relevance() -> None:
    relevant = {"a": 3, "b": 2, "c": 1, "z": 0}
    # Ranking b, x, a: DCG = 2/log2(2) + 0 + 3/log2(4) = 2 + 1.5 = 3.5
    # Ideal 3, 2, 1: 3 + 2/log2(3) + 1/log2(4) = 3 + 1.26186 + 0.5 = 4.76186
    expected = 3.5 / (3 + 2 / math.log2(3) + 0.5)
    assert ndcg_at_k(relevant, ["b", "x", "a"], 10) == pytest.approx(expected)
    assert ndcg_at_k(relevant, ["a", "b", "c"], 10) == pytest.approx(1.0)
    # Cut at k = 1: only the first rank counts, the ideal is the single best grade.
    assert ndcg_at_k(relevant, ["b", "a"], 1) == pytest.approx(2 / 3)
    assert ndcg_at_k({}, ["a"], 10) == 0.0


def test_percentile_interpolates_linearly() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == pytest.approx(25.0)  # position 1.5
    assert percentile(values, 95) == pytest.approx(38.5)  # position 2.85
    assert percentile([7.0], 95) == 7.0
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def _query(query_id: str, groups: list[tuple[str, ...]], split: str = "dev") -> JudgedQuery:
    return JudgedQuery(
        id=query_id,
        split=split,
        query=f"question {query_id}",
        answerable=bool(groups),
        evidence_groups=tuple(
            EvidenceGroup(part=f"p{i}", message_ids=ids) for i, ids in enumerate(groups)
        ),
        relevant={mid: 3 for ids in groups for mid in ids},
    )


def test_summary_macro_micro_and_unanswerable_scores() -> None:
    runs = [
        # 2 groups, one covered at rank 1: recall 0.5, RR 1.
        QueryRun(_query("Q1", [("a",), ("b",)]), ("a", "x"), (0.05, 0.04), 10.0),
        # 1 group covered at rank 2: recall 1, RR 0.5, fully covered.
        QueryRun(_query("Q2", [("c",)]), ("x", "c"), (0.03, 0.02), 20.0),
        # unanswerable: only scores and latency count.
        QueryRun(_query("Q3", []), ("x", "y"), (0.01, 0.005), 30.0),
    ]
    summary = summarize([query_row(run) for run in runs])
    assert summary["queries"] == 3
    assert summary["answerable"] == 2
    assert summary["recall@10"] == pytest.approx(0.75)  # mean of 0.5 and 1
    assert summary["group_recall_micro@10"] == pytest.approx(2 / 3)  # 2 of 3 groups
    assert summary["full_coverage@10"] == pytest.approx(0.5)
    assert summary["mrr@20"] == pytest.approx(0.75)
    assert summary["latency_p50_ms"] == pytest.approx(20.0)
    assert summary["latency_p95_ms"] == pytest.approx(29.0)
    assert summary["scores_unanswerable"]["top1_max"] == pytest.approx(0.01)
    assert summary["scores_unanswerable"]["mean_top5_median"] == pytest.approx(0.0075)
    assert summary["scores_answerable"]["top1_median"] == pytest.approx(0.04)


def test_failed_query_counts_as_a_miss() -> None:
    run = QueryRun(_query("Q1", [("a",)]), (), (), 5.0, error="query has no searchable tokens")
    row = query_row(run)
    assert row["recall@10"] == 0.0
    assert row["rr@20"] == 0.0
    assert row["top1_score"] is None
    assert summarize([row])["errors"] == 1
