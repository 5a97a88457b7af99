"""Answer-path metrics over per-query rows: pure functions, no artifact."""

from typing import Any

import pytest

from slackquery.evaluation.answers import summarize, sweep


def row(answerable: bool, verdict: str, strength: float, **facts: Any) -> dict[str, Any]:
    base = {
        "answerable": answerable,
        "verdict": verdict,
        "strength": strength,
        "cited": [],
        "citations_valid": 0,
        "citations_checked": 0,
        "verified": verdict == "insufficient_evidence",
        "strict_hits": 0,
        "lenient_hits": 0,
        "groups": 1,
        "groups_cited": 0,
        "latency_ms": 10.0,
    }
    return {**base, **facts}


ROWS = [
    row(
        True,
        "answered",
        0.9,
        cited=["a", "b"],
        citations_valid=2,
        citations_checked=2,
        verified=True,
        strict_hits=1,
        lenient_hits=2,
        groups=2,
        groups_cited=1,
        latency_ms=20.0,
    ),
    row(True, "insufficient_evidence", 0.3),
    row(False, "insufficient_evidence", 0.2),
    row(False, "partial", 0.6, cited=["z"], citations_valid=1, citations_checked=1),
]


def test_summary_rates_and_precisions() -> None:
    summary = summarize(ROWS)
    assert (summary["answerable"], summary["unanswerable"]) == (2, 2)
    assert summary["answer_rate"] == 0.5
    assert summary["correct_abstention"] == 0.5
    assert summary["citation_validity"] == 1.0
    # Precision counts the answerable queries' citations only.
    assert summary["strict_precision"] == 0.5
    assert summary["lenient_precision"] == 1.0
    assert summary["part_coverage"] == pytest.approx(0.25)
    assert summary["latency_p95_ms"] == pytest.approx(18.5)


def test_an_answer_without_verified_citations_does_not_count_as_answered() -> None:
    unverified = row(True, "answered", 0.9, cited=["a"], verified=False)
    assert summarize([unverified])["answer_rate"] == 0.0


def test_sweep_recomputes_both_rates_from_strengths() -> None:
    by_threshold = {entry["threshold"]: entry for entry in sweep(ROWS)}
    assert by_threshold[0.25] == {
        "threshold": 0.25,
        "answer_rate": 1.0,
        "correct_abstention": 0.5,
    }
    assert by_threshold[0.7]["correct_abstention"] == 1.0
    assert by_threshold[0.95]["answer_rate"] == 0.0
