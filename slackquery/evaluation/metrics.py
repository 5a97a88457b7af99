"""Retrieval metrics over ranked lists of source message ids: pure functions, no I/O.

Definitions follow the RecallHQ evaluation so our figures compare with its published ones
(see docs/evaluation.md): a query's answer has *evidence groups*, and retrieving any one
message of a group covers that part of the answer. Rankings are deduplicated first (a
message counted twice must not cover two ranks), keeping each id's best rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, median
from typing import Any

from slackquery.evaluation.queries import JudgedQuery

RECALL_KS = (5, 10, 20)
MRR_K = 20
NDCG_K = 10
SCORE_TOP_K = 5


def dedupe(ranking: Iterable[str]) -> list[str]:
    """The ranking with repeated ids removed, each kept at its first (best) rank."""
    return list(dict.fromkeys(ranking))


def groups_covered(groups: Sequence[Iterable[str]], ranking: Sequence[str], k: int) -> int:
    """How many evidence groups have at least one message in the top `k`."""
    top = set(dedupe(ranking)[:k])
    return sum(1 for group in groups if top.intersection(group))


def recall_at_k(groups: Sequence[Iterable[str]], ranking: Sequence[str], k: int) -> float:
    """Share of the query's evidence groups with at least one message in the top `k`."""
    if not groups:
        raise ValueError("recall needs at least one evidence group")
    return groups_covered(groups, ranking, k) / len(groups)


def fully_covered(groups: Sequence[Iterable[str]], ranking: Sequence[str], k: int) -> bool:
    """True when every evidence group has a message in the top `k` (the whole answer)."""
    return groups_covered(groups, ranking, k) == len(groups)


def reciprocal_rank(groups: Sequence[Iterable[str]], ranking: Sequence[str], k: int) -> float:
    """1 / rank of the first message of any evidence group within the top `k`, else 0."""
    evidence = {mid for group in groups for mid in group}
    for rank, message_id in enumerate(dedupe(ranking)[:k], start=1):
        if message_id in evidence:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(relevant: Mapping[str, int], ranking: Sequence[str], k: int) -> float:
    """Normalised discounted cumulative gain with linear graded gain (trec_eval's form).

    DCG = sum over ranks i = 1..k of grade / log2(i + 1); the ideal DCG sorts all judged
    grades descending. A query with no positive grades scores 0.
    """
    ideal_grades = sorted((grade for grade in relevant.values() if grade > 0), reverse=True)
    ideal = _dcg(ideal_grades[:k])
    if ideal == 0:
        return 0.0
    gains = [relevant.get(message_id, 0) for message_id in dedupe(ranking)[:k]]
    return _dcg(gains) / ideal


def _dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) with linear interpolation between closest ranks.

    Same as numpy's default (`method="linear"`): position (n - 1) * q / 100 in the sorted
    values, interpolated between its two neighbours.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("percentile must be between 0 and 100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    fraction = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction


@dataclass(frozen=True)
class QueryRun:
    """What one search returned for one judged query: ids, fused scores and time taken."""

    query: JudgedQuery
    ranking: tuple[str, ...]
    scores: tuple[float, ...]
    latency_ms: float
    error: str | None = None
    top_cosine: float | None = None


def query_row(run: QueryRun) -> dict[str, Any]:
    """Per-query metrics as one flat row (the report's JSON lines, and `summarize`'s input)."""
    query = run.query
    ranking = dedupe(run.ranking)
    groups = [group.message_ids for group in query.evidence_groups]
    row: dict[str, Any] = {
        "query_id": query.id,
        "split": query.split,
        "type": query.type,
        "answerable": query.answerable,
        "query": query.query,
        "latency_ms": run.latency_ms,
        "error": run.error,
        "top1_score": run.scores[0] if run.scores else None,
        "mean_top5_score": fmean(run.scores[:SCORE_TOP_K]) if run.scores else None,
        "top_cosine": run.top_cosine,
        "ranking": ranking[: max(RECALL_KS)],
    }
    if query.answerable:
        evidence = query.evidence_ids
        row["groups"] = len(groups)
        for k in RECALL_KS:
            row[f"groups_covered@{k}"] = groups_covered(groups, ranking, k)
            row[f"recall@{k}"] = recall_at_k(groups, ranking, k)
            row[f"full_coverage@{k}"] = fully_covered(groups, ranking, k)
        row[f"rr@{MRR_K}"] = reciprocal_rank(groups, ranking, MRR_K)
        row[f"ndcg@{NDCG_K}"] = ndcg_at_k(query.relevant, ranking, NDCG_K)
        row["evidence_ranks"] = [
            rank for rank, mid in enumerate(ranking[: max(RECALL_KS)], start=1) if mid in evidence
        ]
    return row


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate per-query rows of one mode/configuration/split into the reported metrics.

    Relevance metrics average over answerable queries (macro), group recall micro pools
    every group of every query, latency covers all queries, and the fused-score
    distribution is given separately for answerable and unanswerable queries so an
    abstention threshold can be read off it.
    """
    answerable = [row for row in rows if row["answerable"]]
    unanswerable = [row for row in rows if not row["answerable"]]
    latencies = [row["latency_ms"] for row in rows]
    summary: dict[str, Any] = {
        "queries": len(rows),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "errors": sum(1 for row in rows if row["error"]),
        "latency_p50_ms": percentile(latencies, 50) if latencies else None,
        "latency_p95_ms": percentile(latencies, 95) if latencies else None,
    }
    embedding = [row["query_embedding_ms"] for row in rows if "query_embedding_ms" in row]
    if embedding:
        # Latency a cold query would see: the warm search plus embedding its text once.
        cold = [row["latency_ms"] + row.get("query_embedding_ms", 0.0) for row in rows]
        summary["query_embedding_p50_ms"] = percentile(embedding, 50)
        summary["query_embedding_p95_ms"] = percentile(embedding, 95)
        summary["latency_with_embedding_p50_ms"] = percentile(cold, 50)
        summary["latency_with_embedding_p95_ms"] = percentile(cold, 95)
    total_groups = sum(row["groups"] for row in answerable)
    for k in RECALL_KS:
        summary[f"recall@{k}"] = _mean(row[f"recall@{k}"] for row in answerable)
        summary[f"group_recall_micro@{k}"] = (
            sum(row[f"groups_covered@{k}"] for row in answerable) / total_groups
            if total_groups
            else None
        )
        summary[f"full_coverage@{k}"] = _mean(
            float(row[f"full_coverage@{k}"]) for row in answerable
        )
    summary[f"mrr@{MRR_K}"] = _mean(row[f"rr@{MRR_K}"] for row in answerable)
    summary[f"ndcg@{NDCG_K}"] = _mean(row[f"ndcg@{NDCG_K}"] for row in answerable)
    summary["scores_answerable"] = score_distribution(answerable)
    summary["scores_unanswerable"] = score_distribution(unanswerable)
    return summary


def score_distribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Min / median / max of the top-1 and mean-top-5 fused scores over `rows`, and of the
    best cosine similarity among the results when the semantic arm ran.

    Fused RRF scores depend only on ranks and weights, so in a single-arm mode they are
    nearly constant; the raw cosine is the more telling abstention signal there.
    """
    top1 = [row["top1_score"] for row in rows if row["top1_score"] is not None]
    top5 = [row["mean_top5_score"] for row in rows if row["mean_top5_score"] is not None]
    cosine = [row["top_cosine"] for row in rows if row.get("top_cosine") is not None]
    if not top1:
        return None
    distribution: dict[str, Any] = {}
    if cosine:
        distribution.update(
            top_cosine_min=min(cosine), top_cosine_median=median(cosine), top_cosine_max=max(cosine)
        )
    return distribution | {
        "queries": len(top1),
        "top1_min": min(top1),
        "top1_median": median(top1),
        "top1_max": max(top1),
        "mean_top5_min": min(top5),
        "mean_top5_median": median(top5),
        "mean_top5_max": max(top5),
    }


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return fmean(values) if values else None
