"""Paired comparison of answer-path runs: ratios resampled as ratios, queries paired."""

import json
from pathlib import Path
from typing import Any

import pytest

from slackquery.errors import SlackqueryError
from slackquery.evaluation.answer_compare import (
    answer_comparison_text,
    compare_answers,
    compare_saved,
    decide_answers,
)
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
    with pytest.raises(SlackqueryError, match=r"judge different queries \(q1, q2\)"):
        compare_answers("A", "B", {"set": ([row("q1", 1, 1)], [row("q2", 1, 1)])})
    unanswerable = row("q1", 0, 0, answerable=False)
    with pytest.raises(SlackqueryError, match=r"judge different queries \(q1\)"):
        compare_answers("A", "B", {"set": ([row("q1", 1, 1)], [unanswerable])})


def test_a_side_without_citations_has_no_precision_to_compare() -> None:
    # A abstains everywhere: its precision is undefined, not 0, so there is no difference.
    a = [row(f"q{i}", 0, 0) for i in range(10)]
    b = [row(f"q{i}", 2, 1) for i in range(10)]
    figures = compare_answers("A", "B", {"set": (a, b)}).intervals["set"]
    assert "strict_precision" not in figures and "lenient_precision" not in figures
    assert figures["answer_rate"].mean == 1.0


def test_resamples_without_citations_are_left_out_not_counted_as_zero() -> None:
    # Both sides are always right; A cites in one query of ten. A resample that misses that
    # query has no precision for A: it must not widen the interval to [0, 1].
    a = [row("q0", 1, 1), *(row(f"q{i}", 0, 0) for i in range(1, 10))]
    b = [row(f"q{i}", 1, 1) for i in range(10)]
    strict = compare_answers("A", "B", {"set": (a, b)}).intervals["set"]["strict_precision"]
    assert (strict.mean, strict.low, strict.high) == (0.0, 0.0, 0.0)


def test_a_query_twice_in_one_run_is_an_error() -> None:
    with pytest.raises(SlackqueryError, match="q1 appears twice"):
        compare_answers("A", "B", {"set": ([row("q1", 1, 1)] * 2, [row("q1", 1, 1)])})


def test_the_rule_keeps_a_pooled_gain_no_set_pays_for() -> None:
    a = [row(f"q{i}", 2, 1) for i in range(30)]
    b = [row(f"q{i}", 1, 1) for i in range(30)]  # the same evidence, half the citations
    decision = decide_answers(compare_answers("A", "B", {"x": (a, b), "y": (a, b)}))
    assert decision.keep
    assert decision.reasons == ("pooled strict precision and lenient precision above zero",)


def test_the_rule_refuses_a_gain_that_costs_answers() -> None:
    # B cites better where it answers, but stops answering four questions of twenty.
    a = [row(f"q{i}", 2, 1) for i in range(20)]
    b = [row(f"q{i}", 1, 1) if i >= 4 else row(f"q{i}", 0, 0) for i in range(20)]
    decision = decide_answers(compare_answers("A", "B", {"x": (a, b)}))
    assert not decision.keep
    assert any("answer rate falls by 0.200" in reason for reason in decision.reasons)


def test_one_questions_worth_is_the_most_one_question_can_move_a_figure() -> None:
    a = [row(f"q{i}", 1, 1) for i in range(10)]
    b = [row("q0", 3, 1), *(row(f"q{i}", 1, 1) for i in range(1, 10))]
    worth = compare_answers("A", "B", {"set": (a, b)}).worth["set"]
    assert worth["strict_precision"] == pytest.approx(3 / 12)  # q0's citations of B's twelve
    assert worth["part_coverage"] == pytest.approx(1 / 10)


def _saved(path: Path, **made: Any) -> Path:
    """An answer run saved by `--answers --rows`, every row tagged with `made`."""
    rows = [{"query_set": "dev", **made, **row(f"q{i}", 1, 1)} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_saved_runs_with_and_without_filters_are_not_paired(tmp_path: Path) -> None:
    with_filters = _saved(tmp_path / "f.jsonl", filters_sent=True, generation_id="g1")
    without = _saved(tmp_path / "n.jsonl", filters_sent=False, generation_id="g1")
    with pytest.raises(
        SlackqueryError, match=r"with the queries' filters and .* with --no-filters"
    ):
        compare_saved(with_filters, without)
    other = _saved(tmp_path / "o.jsonl", filters_sent=True, generation_id="g2")
    text = answer_comparison_text(compare_saved(with_filters, other), changed=False)
    assert "Note: the runs come from different embedding generations: A g1; B g2." in text
    old = compare_saved(_saved(tmp_path / "old.jsonl"), without)
    assert old.notes[0].startswith(f"{tmp_path / 'old.jsonl'}: the rows do not record whether")
