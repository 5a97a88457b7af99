"""Paired comparison of two retrieval configurations: per-query deltas and bootstrap intervals.

Twenty judged queries cannot tell a 0.02 improvement from noise, and a mean over a handful
of queries hides which ones moved. So a comparison pairs the two configurations query by
query (the same question under A and under B), takes the difference of each per-query
metric, and resamples those differences with replacement (the paired bootstrap,
Efron & Tibshirani ch. 16; Sakai 2006 for IR) to get a 95% interval of the mean
difference. Pooled over several query sets the resampling is stratified: each set is
resampled within itself at its own size, so a pooled interval never mixes one set's
queries into another's, and each query weighs the same in the pooled mean.

The rule for defaults (docs/evaluation.md) is `decide`: a candidate stays only if it beats
the simpler configuration on the pooled sets with the interval's lower bound above zero,
and is not worse on any set by more than one query's worth.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slackquery.errors import SlackqueryError
from slackquery.evaluation import MODES
from slackquery.evaluation.grid import GridPoint, parse_config
from slackquery.evaluation.metrics import MRR_K, NDCG_K

# Per-query row key and display name of each compared metric.
METRICS = (
    ("recall@10", "R@10"),
    (f"rr@{MRR_K}", f"MRR@{MRR_K}"),
    (f"ndcg@{NDCG_K}", f"nDCG@{NDCG_K}"),
)
# The metrics the rule decides on; nDCG is reported beside them.
DECIDING = ("recall@10", f"rr@{MRR_K}")
RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 20261201
POOLED = "pooled"


@dataclass(frozen=True)
class Interval:
    """Mean paired difference (B - A) and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    queries: int


@dataclass(frozen=True)
class QueryDelta:
    """One query's metric under A and under B."""

    query_set: str
    query_id: str
    metric: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        """B minus A."""
        return self.b - self.a


@dataclass(frozen=True)
class Comparison:
    """A against B on one or more query sets: intervals per set and pooled, per metric."""

    a: str
    b: str
    intervals: Mapping[str, Mapping[str, Interval]]  # query set (or POOLED) -> metric -> interval
    deltas: tuple[QueryDelta, ...]
    notes: tuple[str, ...] = ()  # what qualifies the comparison (`protocol_notes`)

    @property
    def sets(self) -> list[str]:
        """The query sets compared, without the pooled entry."""
        return [name for name in self.intervals if name != POOLED]


def paired_bootstrap(
    strata: Sequence[Sequence[Sequence[float]]],
    statistic: Callable[[Any], Any],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """Percentile bootstrap interval of a statistic of per-query sums, stratified.

    `strata` holds one table per query set: a row per query, a column per quantity summed
    over queries (a difference, a count of hits, of citations). Each resample draws every
    stratum's own number of rows from it with replacement and sums each column over all
    drawn rows; `statistic` maps those sums (an array, one row per resample) to the
    compared value per resample, so a ratio of sums (citation precision) is resampled as a
    ratio, not as a mean of per-query ratios. Seeded: the same input gives the same interval.
    """
    # numpy is imported here, not at the top: the eval command imports this module, and
    # every other subcommand's start-up should not pay for it.
    import numpy as np

    groups = [np.asarray(stratum, dtype=float) for stratum in strata if len(stratum)]
    if not groups:
        raise ValueError("a bootstrap interval needs at least one query")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    rng = np.random.default_rng(seed)
    sums = np.zeros((resamples, groups[0].shape[1]))
    for group in groups:
        picks = rng.integers(0, len(group), size=(resamples, len(group)))
        sums += np.stack([column[picks].sum(axis=1) for column in group.T], axis=1)
    tail = (1 - confidence) / 2 * 100
    # A resample where the statistic is undefined (NaN: a ratio over no citations) is left
    # out of the percentiles rather than counted as 0.
    low, high = np.nanpercentile(statistic(sums), [tail, 100 - tail])
    point = statistic(sum(group.sum(axis=0) for group in groups)[np.newaxis, :])[0]
    return Interval(float(point), float(low), float(high), sum(len(group) for group in groups))


def bootstrap_interval(strata: Sequence[Sequence[float]], **options: Any) -> Interval:
    """Percentile bootstrap interval of the mean of paired differences, stratified.

    `strata` holds one list of per-query differences per query set (one list for a single
    set); the statistic is the mean over all drawn queries (`paired_bootstrap`).
    """
    total = sum(len(stratum) for stratum in strata)
    table = [[[difference] for difference in stratum] for stratum in strata]
    return paired_bootstrap(table, lambda sums: sums[:, 0] / total, **options)


def paired_deltas(
    query_set: str,
    rows_a: Sequence[Mapping],
    rows_b: Sequence[Mapping],
) -> list[QueryDelta]:
    """Per-query metric pairs of the answerable queries that both runs hold.

    The two runs must cover the same answerable queries: a comparison over different
    questions is not paired, so a mismatch is an error rather than a silent intersection.
    """
    a = {row["query_id"]: row for row in rows_a if row["answerable"]}
    b = {row["query_id"]: row for row in rows_b if row["answerable"]}
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))
        raise SlackqueryError(
            f"{query_set}: the two runs judge different queries ({', '.join(only[:5])} ...)"
        )
    return [
        QueryDelta(
            query_set, query_id, metric, float(a[query_id][metric]), float(b[query_id][metric])
        )
        for query_id in a
        for metric, _ in METRICS
    ]


def compare(
    a: str,
    b: str,
    runs: Mapping[str, tuple[Sequence[Mapping], Sequence[Mapping]]],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Comparison:
    """Compare B against A on every query set of `runs` (set -> (rows of A, rows of B)),
    and pooled over them when there are several."""
    deltas = [
        delta
        for name, (rows_a, rows_b) in runs.items()
        for delta in paired_deltas(name, rows_a, rows_b)
    ]
    intervals: dict[str, dict[str, Interval]] = {}
    names = list(runs)
    for metric, _ in METRICS:
        per_set = {
            name: [d.delta for d in deltas if d.query_set == name and d.metric == metric]
            for name in names
        }
        for name in names:
            if per_set[name]:
                intervals.setdefault(name, {})[metric] = bootstrap_interval(
                    [per_set[name]], resamples=resamples, seed=seed
                )
        if len(names) > 1:
            intervals.setdefault(POOLED, {})[metric] = bootstrap_interval(
                list(per_set.values()), resamples=resamples, seed=seed
            )
    return Comparison(a, b, intervals, tuple(deltas))


@dataclass(frozen=True)
class Decision:
    """What the rule says about B (the candidate) against A (the simpler configuration)."""

    keep: bool
    reasons: tuple[str, ...]


def verdict_text(decision: Decision) -> str:
    """The rule's verdict as a report line: `Rule: B beats A (…).` or `Rule: keep A (…).`"""
    verdict = "B beats A" if decision.keep else "keep A"
    return f"Rule: {verdict} ({'; '.join(decision.reasons)})."


def decide(comparison: Comparison) -> Decision:
    """The rule for defaults: keep B over A only if, on Recall@10 or MRR@20, the pooled
    interval's lower bound is above zero, on neither of them the pooled interval lies
    wholly below zero, and on no query set either of them falls by more than one query's
    worth (1 / answerable queries of that set: the most one query can move a mean)."""
    pooled = comparison.intervals.get(POOLED) or comparison.intervals[comparison.sets[0]]
    names = dict(METRICS)
    failures = []
    better = [metric for metric in DECIDING if pooled[metric].low > 0]
    if not better:
        failures.append("no pooled interval of R@10 or MRR@20 lies above zero")
    for metric in DECIDING:
        if pooled[metric].high < 0:
            failures.append(f"pooled {names[metric]} is worse (interval below zero)")
        for name in comparison.sets:
            interval = comparison.intervals[name][metric]
            if interval.mean < -1 / interval.queries - 1e-12:
                failures.append(
                    f"{name}: {names[metric]} falls by {-interval.mean:.3f}, more than one "
                    f"query's worth ({1 / interval.queries:.3f})"
                )
    if failures:
        return Decision(keep=False, reasons=tuple(failures))
    won = " and ".join(names[metric] for metric in better)
    return Decision(keep=True, reasons=(f"pooled {won} interval above zero",))


def comparison_table(comparison: Comparison) -> str:
    """One row per query set (and pooled): mean difference and interval per metric."""
    from slackquery.evaluation.report import markdown_table

    headers = ["Query set", "Queries", *(f"Δ {label} [95% CI]" for _, label in METRICS)]
    rows = []
    for name, by_metric in comparison.intervals.items():
        first = next(iter(by_metric.values()))
        rows.append(
            [
                name,
                str(first.queries),
                *(interval_text(by_metric[metric]) for metric, _ in METRICS),
            ]
        )
    return markdown_table(headers, rows)


def moved_queries_table(comparison: Comparison) -> str:
    """The queries whose Recall@10 or reciprocal rank changed, with both values."""
    from slackquery.evaluation.report import markdown_table

    by_query: dict[tuple[str, str], dict[str, QueryDelta]] = {}
    for delta in comparison.deltas:
        by_query.setdefault((delta.query_set, delta.query_id), {})[delta.metric] = delta
    rows = []
    for (name, query_id), metrics in by_query.items():
        if any(abs(metrics[m].delta) > 1e-12 for m in DECIDING):
            rows.append(
                [
                    name,
                    query_id,
                    *(f"{metrics[m].a:.2f} -> {metrics[m].b:.2f}" for m, _ in METRICS),
                ]
            )
    if not rows:
        return "(no query moved on R@10 or MRR@20)"
    return markdown_table(["Query set", "Query", *(label for _, label in METRICS)], rows)


def interval_text(interval: Interval) -> str:
    """`+0.012 [-0.003, +0.030]`: the mean difference and its interval."""
    return f"{interval.mean:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a retrieval mode under a fusion configuration, from this
    run or from the per-query rows an earlier run saved with `--rows`."""

    text: str
    mode: str
    point: GridPoint
    rows_file: Path | None = None


def parse_side(text: str) -> Side:
    """`[ROWS.jsonl#][MODE][:CONFIG]`: a mode (`lexical`, `semantic`, `hybrid`), a hybrid
    configuration in the grid's syntax (`rrf_k=60;arm.context=off`, or `default`),
    or both (`hybrid:rrf_k=60`); a bare configuration means hybrid. With a rows file the
    side's rows are read from it instead of being run."""
    rows_file = None
    rest = text.strip()
    if "#" in rest or rest.endswith(".jsonl"):
        path, _, rest = rest.partition("#")
        rows_file = Path(path)
    mode, _, config = rest.partition(":")
    if mode not in MODES:  # a bare configuration, or nothing
        mode, config = "hybrid", rest
    point = parse_config(config)
    if mode != "hybrid" and not point.is_default:
        raise SlackqueryError(f"--compare {text!r}: only hybrid takes a fusion configuration")
    return Side(text, mode, point, rows_file)


def side_rows(side: Side, runs: Mapping[str, Sequence[Mapping]]) -> dict[str, list[Mapping]]:
    """The side's per-query rows per query set, from `runs` (rows of this run, each with
    `query_set`, `mode` and `config`) or from its rows file."""
    rows = runs if side.rows_file is None else {"file": read_rows(side.rows_file)}
    if any("mode" not in row for batch in rows.values() for row in batch):
        raise SlackqueryError(
            f"--compare {side.text!r}: answer rows; compare them with --answers --compare"
        )
    chosen: dict[str, list[Mapping]] = {}
    for row in (row for batch in rows.values() for row in batch):
        if row["mode"] == side.mode and row["config"] == side.point.name:
            chosen.setdefault(row["query_set"], []).append(row)
    if not chosen:
        where = side.rows_file or "this run"
        raise SlackqueryError(f"--compare {side.text!r}: no rows for it in {where}")
    return chosen


def read_rows(path: Path) -> list[dict]:
    """Per-query rows written by `slackquery eval --rows`."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SlackqueryError(f"{path}: cannot read rows ({error})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SlackqueryError(f"{path}:{number}: not a JSON row ({error.msg})") from None
        if not isinstance(row, dict) or "query_set" not in row:
            raise SlackqueryError(
                f"{path}:{number}: a row without `query_set`; write rows with --rows"
            )
        rows.append(row)
    return rows


def compare_sides(
    a: Side, b: Side, runs: Mapping[str, Sequence[Mapping]], **options: int
) -> Comparison:
    """Compare side B against side A on every query set both hold."""
    rows_a, rows_b = side_rows(a, runs), side_rows(b, runs)
    if set(rows_a) != set(rows_b):
        raise SlackqueryError(
            f"--compare: {a.text!r} covers query sets {sorted(rows_a)}, {b.text!r} {sorted(rows_b)}"
        )
    notes = protocol_notes(a.text, rows_a, b.text, rows_b)
    pairs = {name: (rows_a[name], rows_b[name]) for name in rows_a}
    return dataclasses.replace(compare(a.text, b.text, pairs, **options), notes=notes)


def protocol(filters_sent: bool, artifact: Mapping[str, Any]) -> dict[str, Any]:
    """How a run was made, as each of its saved rows records it: whether the queries'
    filters were sent, and the artifact's embedding generation and build."""
    return {
        "filters_sent": filters_sent,
        "generation_id": artifact.get("generation_id"),
        "build_id": artifact.get("build_id"),
    }


def protocol_notes(
    a: str,
    rows_a: Mapping[str, Sequence[Mapping]],
    b: str,
    rows_b: Mapping[str, Sequence[Mapping]],
) -> tuple[str, ...]:
    """Refuse to pair runs (rows by query set) of which one sent the queries' filters and
    the other did not: their questions differ. Otherwise the notes that qualify the
    pairing: another embedding generation, or a side whose rows do not record their
    protocol (saved before rows did)."""
    sent_a, sent_b = _recorded(rows_a, "filters_sent"), _recorded(rows_b, "filters_sent")
    unknown = [side for side, sent in ((a, sent_a), (b, sent_b)) if None in sent]
    if not unknown and sent_a != sent_b:
        raise SlackqueryError(
            f"--compare: {a!r} ran {_filters_text(sent_a)} and {b!r} {_filters_text(sent_b)}: "
            "compare runs that sent the same filters"
        )
    notes = []
    if unknown:
        notes.append(
            f"{' and '.join(unknown)}: the rows do not record whether filters were sent "
            "(saved before rows did); make sure both runs sent the same filters"
        )
    generation_a, generation_b = (
        _recorded(rows, "generation_id") - {None} for rows in (rows_a, rows_b)
    )
    if generation_a and generation_b and generation_a != generation_b:
        notes.append(
            "the runs come from different embedding generations: "
            f"A {', '.join(sorted(generation_a))}; B {', '.join(sorted(generation_b))}"
        )
    return tuple(notes)


def _recorded(rows: Mapping[str, Sequence[Mapping]], key: str) -> set[Any]:
    return {row.get(key) for batch in rows.values() for row in batch}


def _filters_text(sent: set[bool]) -> str:
    return " and ".join(
        "with the queries' filters" if value else "with --no-filters" for value in sorted(sent)
    )


def decisions_table(comparisons: Sequence[Comparison]) -> str:
    """One row per comparison: pooled (or single-set) intervals of the deciding metrics,
    each set's mean differences, and the rule's verdict."""
    from slackquery.evaluation.report import markdown_table

    names = dict(METRICS)
    rows = []
    for comparison in comparisons:
        overall = comparison.intervals.get(POOLED) or comparison.intervals[comparison.sets[0]]
        per_set = "; ".join(
            f"{name} " + " / ".join(f"{comparison.intervals[name][m].mean:+.3f}" for m in DECIDING)
            for name in comparison.sets
        )
        rows.append(
            [
                comparison.a,
                comparison.b,
                *(interval_text(overall[metric]) for metric in DECIDING),
                per_set,
                "B" if decide(comparison).keep else "A",
            ]
        )
    headers = [
        "A (simpler)",
        "B",
        *(f"pooled Δ {names[m]} [95% CI]" for m in DECIDING),
        "per set Δ " + " / ".join(names[m] for m in DECIDING),
        "rule keeps",
    ]
    return markdown_table(headers, rows)
