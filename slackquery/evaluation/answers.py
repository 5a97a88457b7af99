"""Answer-path evaluation: judged queries through `answer_question` and `verify_citations`.

Per set it reports the answer rate (answerable queries answered with at least one citation
and a `verified` check), the correct abstention rate (unanswerable queries answered
`insufficient_evidence`), citation validity (citations whose check found no problem),
strict citation precision (cited messages in the query's evidence groups / all cited),
lenient precision (cited messages in an evidence group or graded relevant >= 1), part
coverage (share of evidence groups with a cited message) and warm latency (the query
vectors already cached, so the figures exclude query embedding; first-time embedding is
reported beside them).

Abstention is a threshold on evidence strength (the best part's coverage), so the sweep
table recomputes both rates for other thresholds from the measured strengths: that is how
`answer_min_coverage` was chosen (docs/evaluation.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from serving.answer_models import AnswerResponse
from serving.answers import answer_question, verify_citations
from serving.engine import SearchEngine
from slackquery.artifacts.publish import current_artifact
from slackquery.errors import SlackqueryError
from slackquery.evaluation.metrics import percentile
from slackquery.evaluation.queries import JudgedQuery
from slackquery.evaluation.report import markdown_table
from slackquery.evaluation.runner import (
    build_request,
    corpus_settings,
    inspect_artifact,
    prepare_corpus,
)
from slackquery.settings import Settings

SWEEP = tuple(round(0.05 * step, 2) for step in range(1, 20))

Progress = Callable[[str], None]


def ask(engine: SearchEngine, query: JudgedQuery) -> AnswerResponse:
    """`answer_question` with the judged query's text and filters, as the runner searches."""
    request = build_request(query, "hybrid")
    return answer_question(
        engine,
        request.query,
        channel_ids=request.channel_ids,
        author_ids=request.author_ids,
        start_ts_us=request.start_ts_us,
        end_ts_us=request.end_ts_us,
    )


def answer_row(
    engine: SearchEngine, query: JudgedQuery, response: AnswerResponse, elapsed_ms: float
) -> dict[str, Any]:
    """One query's answer-path facts, with its citations checked by `verify_citations`."""
    check = verify_citations(engine, response.answer, response.artifact_id)
    cited = [c.source_message_id or c.document_id for c in response.citations]
    evidence = query.evidence_ids
    lenient = evidence | {mid for mid, grade in query.relevant.items() if grade >= 1}
    covered = sum(1 for group in query.evidence_groups if set(group.message_ids) & set(cited))
    return {
        "id": query.id,
        "answerable": query.answerable,
        "verdict": response.verdict,
        "strength": max(part.strength for part in response.parts),
        "part_strengths": [part.strength for part in response.parts],
        "cited": cited,
        "citations_valid": sum(1 for c in check.citations if not c.problems),
        "citations_checked": len(check.citations),
        "verified": check.verdict == "verified",
        "strict_hits": sum(1 for mid in cited if mid in evidence),
        "lenient_hits": sum(1 for mid in cited if mid in lenient),
        "groups": len(query.evidence_groups),
        "groups_cited": covered,
        "latency_ms": elapsed_ms,
        "search_ms": response.timings_ms.get("total", 0.0),
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The answer-path figures of one set of per-query rows."""
    answerable = [row for row in rows if row["answerable"]]
    unanswerable = [row for row in rows if not row["answerable"]]
    cited = sum(len(row["cited"]) for row in answerable)
    checked = sum(row["citations_checked"] for row in rows)
    latencies = [row["latency_ms"] for row in rows]
    return {
        "queries": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "answer_rate": _share(answerable, is_answered),
        "correct_abstention": _share(unanswerable, is_abstention),
        "citations": checked,
        "citation_validity": (
            sum(row["citations_valid"] for row in rows) / checked if checked else None
        ),
        "strict_precision": sum(r["strict_hits"] for r in answerable) / cited if cited else None,
        "lenient_precision": sum(r["lenient_hits"] for r in answerable) / cited if cited else None,
        "part_coverage": (
            fmean(row["groups_cited"] / row["groups"] for row in answerable) if answerable else None
        ),
        "latency_p50_ms": percentile(latencies, 50) if latencies else None,
        "latency_p95_ms": percentile(latencies, 95) if latencies else None,
    }


def is_answered(row: Mapping[str, Any]) -> bool:
    """An answer that counts for the answer rate: not an abstention, cited and verified."""
    return row["verdict"] != "insufficient_evidence" and bool(row["cited"]) and row["verified"]


def is_abstention(row: Mapping[str, Any]) -> bool:
    """The question answered `insufficient_evidence`."""
    return row["verdict"] == "insufficient_evidence"


def _share(
    rows: Sequence[dict[str, Any]], test: Callable[[Mapping[str, Any]], bool]
) -> float | None:
    return sum(1 for row in rows if test(row)) / len(rows) if rows else None


def sweep(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answer rate and correct abstention had the threshold been each of `SWEEP`.

    A question abstains when its strongest part is below the threshold, else it answers
    (with citations of the evidence it found; their validity is measured separately).
    """
    answerable = [row for row in rows if row["answerable"]]
    unanswerable = [row for row in rows if not row["answerable"]]
    table = []
    for threshold in SWEEP:
        answered = [r for r in answerable if r["strength"] >= threshold]
        abstained = [r for r in unanswerable if r["strength"] < threshold]
        table.append(
            {
                "threshold": threshold,
                "answer_rate": len(answered) / len(answerable) if answerable else None,
                "correct_abstention": len(abstained) / len(unanswerable) if unanswerable else None,
            }
        )
    return table


def evaluate_answers(
    settings: Settings,
    queries: Sequence[JudgedQuery],
    *,
    corpus: Path | None = None,
    prepare: bool = True,
    progress: Progress = print,
) -> dict[str, Any]:
    """Answer every judged query on the published artifact of `corpus`'s home (built and
    published first unless `prepare` is false: an earlier set of this run did it)."""
    if corpus is not None:
        settings = corpus_settings(settings, corpus)
        if prepare:
            prepare_corpus(settings, corpus, progress=progress)
    artifact = current_artifact(settings)
    if artifact is None:
        raise SlackqueryError(f"no published search artifact under {settings.artifact_path}")
    info, warnings = inspect_artifact(settings, artifact, queries, progress)
    engine = SearchEngine(settings)
    rows = []
    try:
        progress(f"answers: warm up {len(queries)} queries (loads the artifact, embeds queries)")
        first_embed = {
            query.id: ask(engine, query).timings_ms.get("embed", 0.0) for query in queries
        }
        progress(f"answers: {len(queries)} queries")
        for query in queries:
            started = time.perf_counter()
            response = ask(engine, query)
            elapsed = (time.perf_counter() - started) * 1000
            row = answer_row(engine, query, response, elapsed)
            row["first_embed_ms"] = first_embed[query.id]
            rows.append(row)
    finally:
        engine.close()
    return {
        "artifact": info,
        "warnings": warnings,
        "threshold": settings.answer_min_coverage,
        "summary": summarize(rows),
        "sweep": sweep(rows),
        "rows": rows,
    }


def answers_table(result: dict[str, Any]) -> str:
    """The summary, the threshold sweep and the per-query rows as Markdown tables."""
    summary = result["summary"]
    keys = [key for key in summary if key not in ("queries", "answerable", "unanswerable")]
    head = (
        f"answer path: {summary['queries']} queries ({summary['answerable']} answerable, "
        f"{summary['unanswerable']} unanswerable), answer_min_coverage {result['threshold']}"
    )
    parts = [
        head,
        markdown_table(["metric", "value"], [[key, _figure(summary[key])] for key in keys]),
        "",
        markdown_table(
            ["threshold", "answer rate", "correct abstention"],
            [
                [_num(r["threshold"], 2), _num(r["answer_rate"]), _num(r["correct_abstention"])]
                for r in result["sweep"]
            ],
        ),
        "",
        markdown_table(
            ["query", "answerable", "verdict", "strength", "cited", "strict", "groups cited"],
            [
                [
                    r["id"],
                    str(r["answerable"]),
                    r["verdict"],
                    _num(r["strength"]),
                    str(len(r["cited"])),
                    str(r["strict_hits"]),
                    f"{r['groups_cited']}/{r['groups']}",
                ]
                for r in result["rows"]
            ],
        ),
    ]
    return "\n".join(parts)


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _figure(value: float | None) -> str:
    """A summary figure: a count as the whole number it is, a rate or a time as `_num`."""
    return str(value) if isinstance(value, int) else _num(value)
