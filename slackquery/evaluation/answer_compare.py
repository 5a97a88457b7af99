"""Paired comparison of two answer-path runs: bootstrap intervals of the difference.

The answer path's figures are ratios over a set (citation precision is cited evidence over
all citations, pooled), so a comparison resamples queries, not per-query ratios: each
resample draws a set's answerable queries with replacement, the same draws for A and B,
and recomputes every figure of both sides from the drawn queries' counts
(`compare.paired_bootstrap`). Unanswerable queries are resampled on their own for correct
abstention. Pooled over several sets, each set is resampled within itself, as for
retrieval (slackquery/evaluation/compare.py).

The sides are per-query rows written by `slackquery eval --answers --rows`, so any two
runs (before and after a change, from two checkouts) can be compared after the fact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slackquery.errors import SlackqueryError
from slackquery.evaluation.answers import is_abstention, is_answered
from slackquery.evaluation.compare import (
    POOLED,
    Decision,
    Interval,
    interval_text,
    paired_bootstrap,
    protocol_notes,
    read_rows,
    verdict_text,
)
from slackquery.evaluation.report import markdown_table

# Figure -> (display name, numerator, denominator) of per-query counts (`_counts`).
FIGURES = {
    "strict_precision": ("strict precision", "strict_hits", "cited"),
    "lenient_precision": ("lenient precision", "lenient_hits", "cited"),
    "part_coverage": ("part coverage", "part_coverage", "queries"),
    "answer_rate": ("answer rate", "answered", "queries"),
    "correct_abstention": ("correct abstention", "abstained", "queries"),
}
# The figures a change may win on; answer rate and abstention may only not get worse.
DECIDING_FIGURES = ("strict_precision", "lenient_precision", "part_coverage")
COUNTS = (
    "strict_hits",
    "lenient_hits",
    "cited",
    "part_coverage",
    "answered",
    "abstained",
    "queries",
)


# What a comparison reads of each answer row (`answers.answer_row`).
ANSWER_ROW_KEYS = frozenset(
    (
        "id",
        "answerable",
        "verdict",
        "cited",
        "verified",
        "strict_hits",
        "lenient_hits",
        "groups",
        "groups_cited",
    )
)


@dataclass(frozen=True)
class AnswerComparison:
    """B against A: per set (and pooled) an interval per figure, and the queries whose
    verdict or citations changed."""

    a: str
    b: str
    intervals: Mapping[str, Mapping[str, Interval]]  # set (or POOLED) -> figure -> interval
    changed: tuple[tuple[str, Mapping[str, Any], Mapping[str, Any]], ...]  # (set, row A, row B)
    # Per set, the most one question can move each figure (the rule's "one question's worth").
    worth: Mapping[str, Mapping[str, float]]
    notes: tuple[str, ...] = ()  # what qualifies the comparison (`compare.protocol_notes`)


def read_answer_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Per-query answer rows written by `eval --answers --rows`, by query set."""
    rows = read_rows(path)
    if not rows:
        raise SlackqueryError(f"{path}: no answer rows")
    for number, row in enumerate(rows, start=1):
        if ANSWER_ROW_KEYS - row.keys():
            raise SlackqueryError(
                f"{path}: row {number} is not an answer row; write them with --answers --rows"
            )
    by_set: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_set.setdefault(row["query_set"], []).append(row)
    return by_set


def _counts(row: Mapping[str, Any]) -> list[float]:
    """One query's contribution to every figure's numerator and denominator (`COUNTS`)."""
    return [
        row["strict_hits"],
        row["lenient_hits"],
        len(row["cited"]),
        row["groups_cited"] / row["groups"] if row["groups"] else 0.0,
        float(is_answered(row)),
        float(is_abstention(row)),
        1.0,
    ]


def _strata(pairs: Sequence[Sequence[tuple]], answerable: bool) -> list[list[list[float]]]:
    """Per set, one row per (answerable, or unanswerable) query: A's counts, then B's."""
    strata = [
        [[*_counts(a), *_counts(b)] for a, b in chosen if a["answerable"] == answerable]
        for chosen in pairs
    ]
    return [stratum for stratum in strata if stratum]


def _difference(figure: str) -> Callable[[Any], Any]:
    """The statistic of one figure: B's ratio of sums minus A's, NaN where a side's ratio
    is undefined (no citations to take a precision of)."""
    import numpy as np

    _, numerator, denominator = FIGURES[figure]
    width = len(COUNTS)
    num, den = COUNTS.index(numerator), COUNTS.index(denominator)

    def ratio(sums: Any, offset: int) -> Any:
        top, bottom = sums[:, offset + num], sums[:, offset + den]
        return np.divide(top, bottom, out=np.full_like(top, np.nan), where=bottom > 0)

    return lambda sums: ratio(sums, width) - ratio(sums, 0)


def _defined(figure: str, strata: Sequence[Sequence[Sequence[float]]]) -> bool:
    """Whether the figure's difference exists over all queries (both sides have a ratio)."""
    import numpy as np

    totals = np.asarray([row for stratum in strata for row in stratum], dtype=float)
    return not math.isnan(_difference(figure)(totals.sum(axis=0, keepdims=True))[0])


def _paired(name: str, rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]) -> list[tuple]:
    """The set's queries as (A row, B row) pairs; both runs must judge the same queries,
    each once, as answerable or not alike."""
    a, b = _by_id(name, rows_a), _by_id(name, rows_b)
    differ = sorted(set(a) ^ set(b)) or sorted(
        query_id for query_id in a if a[query_id]["answerable"] != b[query_id]["answerable"]
    )
    if differ:
        shown = ", ".join(differ[:5]) + (" ..." if len(differ) > 5 else "")
        raise SlackqueryError(f"{name}: the two runs judge different queries ({shown})")
    return [(a[query_id], b[query_id]) for query_id in a]


def _by_id(name: str, rows: Sequence[Mapping]) -> dict[str, Mapping]:
    by_id: dict[str, Mapping] = {}
    for row in rows:
        if row["id"] in by_id:
            raise SlackqueryError(f"{name}: query {row['id']} appears twice in one run")
        by_id[row["id"]] = row
    return by_id


def compare_answers(
    a: str, b: str, runs: Mapping[str, tuple[Sequence[Mapping], Sequence[Mapping]]], **options: int
) -> AnswerComparison:
    """Compare answer run B against A on every set of `runs` (set -> (rows A, rows B)),
    and pooled over them when there are several."""
    pairs = {name: _paired(name, *sides) for name, sides in runs.items()}
    scopes = {name: [name] for name in pairs}
    if len(pairs) > 1:
        scopes[POOLED] = list(pairs)
    intervals: dict[str, dict[str, Interval]] = {}
    worth: dict[str, dict[str, float]] = {}
    for scope, names in scopes.items():
        chosen = [pairs[name] for name in names]
        by_answerable = {answerable: _strata(chosen, answerable) for answerable in (True, False)}
        for figure in FIGURES:
            # Correct abstention is a figure of the unanswerable queries; the rest, of the others.
            strata = by_answerable[figure != "correct_abstention"]
            if not strata or not _defined(figure, strata):
                continue  # no such queries, or a side without citations has no precision
            intervals.setdefault(scope, {})[figure] = paired_bootstrap(
                strata, _difference(figure), **options
            )
            worth.setdefault(scope, {})[figure] = _one_question(figure, strata)
    changed = tuple(
        (name, row_a, row_b)
        for name, set_pairs in pairs.items()
        for row_a, row_b in set_pairs
        if (row_a["verdict"], row_a["cited"]) != (row_b["verdict"], row_b["cited"])
    )
    return AnswerComparison(a, b, intervals, changed, worth)


def _one_question(figure: str, strata: Sequence[Sequence[Sequence[float]]]) -> float:
    """The most one question can move a figure: 1 / the questions of a mean; for a
    precision, the most citations one question has over all citations (in either run)."""
    _, _, denominator = FIGURES[figure]
    if denominator == "queries":
        return 1 / sum(len(stratum) for stratum in strata)
    column = COUNTS.index(denominator)
    runs = [
        [row[offset + column] for stratum in strata for row in stratum]
        for offset in (0, len(COUNTS))
    ]
    return max(max(cited) / sum(cited) for cited in runs if sum(cited))


def decide_answers(comparison: AnswerComparison) -> Decision:
    """The rule for defaults, read on the answer path: keep B over A only if the pooled
    interval of strict precision, lenient precision or part coverage lies above zero, no
    pooled interval of any figure lies wholly below zero, and on no set any figure falls by
    more than one question's worth (the most one question can move it: `_one_question`)."""
    pooled = comparison.intervals.get(POOLED) or next(iter(comparison.intervals.values()))
    sets = [name for name in comparison.intervals if name != POOLED]
    better = [f for f in DECIDING_FIGURES if f in pooled and pooled[f].low > 0]
    failures = []
    if not better:
        failures.append(f"no pooled interval of {_names(DECIDING_FIGURES, 'or')} lies above zero")
    for figure, interval in pooled.items():
        if interval.high < 0:
            failures.append(f"pooled {FIGURES[figure][0]} is worse (interval below zero)")
    for name in sets:
        for figure, interval in comparison.intervals[name].items():
            worth = comparison.worth[name][figure]
            if interval.mean < -worth - 1e-12:
                failures.append(
                    f"{name}: {FIGURES[figure][0]} falls by {-interval.mean:.3f}, more than one "
                    f"question's worth ({worth:.3f})"
                )
    if failures:
        return Decision(keep=False, reasons=tuple(failures))
    return Decision(keep=True, reasons=(f"pooled {_names(better, 'and')} above zero",))


def _names(figures: Sequence[str], joiner: str) -> str:
    return f" {joiner} ".join(FIGURES[figure][0] for figure in figures)


def answer_comparison_text(comparison: AnswerComparison, *, changed: bool) -> str:
    """The intervals per set and pooled, and optionally every query whose answer changed."""
    headers = ["Query set", *(f"Δ {FIGURES[f][0]} [95% CI]" for f in FIGURES)]
    rows = [
        [name, *(_figure_text(by_figure.get(figure)) for figure in FIGURES)]
        for name, by_figure in comparison.intervals.items()
    ]
    parts = [
        f"## answers: {comparison.b} against {comparison.a} (B - A)",
        "",
        *(f"Note: {note}.\n" for note in comparison.notes),
        markdown_table(headers, rows),
        "",
        f"{len(comparison.changed)} answer(s) changed (verdict or citations).",
        "",
        verdict_text(decide_answers(comparison)),
    ]
    if changed and comparison.changed:
        parts += ["", _changed_table(comparison)]
    return "\n".join(parts)


def _changed_table(comparison: AnswerComparison) -> str:
    rows = [
        [
            name,
            a["id"],
            f"{a['verdict']} -> {b['verdict']}",
            f"{a['strict_hits']}/{len(a['cited'])} -> {b['strict_hits']}/{len(b['cited'])}",
            f"{a['groups_cited']}/{a['groups']} -> {b['groups_cited']}/{b['groups']}",
        ]
        for name, a, b in comparison.changed
    ]
    headers = ["Query set", "Query", "verdict", "evidence cited / cited", "groups cited"]
    return markdown_table(headers, rows)


def _figure_text(interval: Interval | None) -> str:
    return "-" if interval is None else f"{interval_text(interval)} (n={interval.queries})"


def compare_saved(path_a: Path, path_b: Path) -> AnswerComparison:
    """Compare two saved answer runs (`eval --answers --rows`); both must hold the same
    query sets."""
    rows_a, rows_b = read_answer_rows(path_a), read_answer_rows(path_b)
    if set(rows_a) != set(rows_b):
        raise SlackqueryError(
            f"--compare: {path_a} covers query sets {sorted(rows_a)}, {path_b} {sorted(rows_b)}"
        )
    notes = protocol_notes(str(path_a), rows_a, str(path_b), rows_b)
    runs = {name: (rows_a[name], rows_b[name]) for name in rows_a}
    return dataclasses.replace(compare_answers(str(path_a), str(path_b), runs), notes=notes)
