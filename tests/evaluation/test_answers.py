"""Answer-path metrics over per-query rows (pure functions, no artifact), the table, and
the warnings given before any question is answered."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slackquery.evaluation import answers
from slackquery.evaluation.answers import answers_table, summarize, sweep
from slackquery.evaluation.queries import EvidenceGroup, JudgedQuery
from slackquery.settings import Settings


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


def test_the_table_prints_counts_as_whole_numbers() -> None:
    result = {"summary": summarize(ROWS), "threshold": 0.15, "sweep": sweep(ROWS), "rows": []}
    table = answers_table(result)
    assert "| citations          | 3      |" in table
    assert "| answer_rate        | 0.500  |" in table


class Stop(Exception):
    """Raised where the engine would start answering."""


def test_missing_judged_messages_are_warned_about_before_answering(
    settings: Settings, publish_ids: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_ids("synthetic:eng:1")
    said: list[str] = []

    def engine(settings: Settings) -> None:
        said.append("engine")
        raise Stop

    monkeypatch.setattr(answers, "SearchEngine", engine)
    query = JudgedQuery(
        id="Q1",
        split="dev",
        query="who deployed?",
        answerable=True,
        evidence_groups=(EvidenceGroup("p1", ("synthetic:eng:2",)),),
    )
    with pytest.raises(Stop):
        answers.evaluate_answers(settings, [query], progress=said.append)
    assert said[1].startswith(
        "warning: 1 of 1 queries judge 1 message(s) the artifact does not hold (synthetic:eng:2)"
    )
    assert said[2] == "engine"
