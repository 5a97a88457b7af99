"""Paired bootstrap intervals, the rule for defaults, and `eval --compare` on saved rows."""

import json
import math
import random
from pathlib import Path

import pytest

from slackquery.cli import main
from slackquery.commands.eval import first_uses
from slackquery.errors import SlackqueryError
from slackquery.evaluation.compare import (
    POOLED,
    bootstrap_interval,
    compare,
    decide,
    paired_deltas,
    parse_side,
    read_rows,
)
from slackquery.evaluation.grid import parse_config
from tests.commands.usage import usage_error


def _rows(values: dict[str, tuple[float, float]], *, answerable: bool = True) -> list[dict]:
    """Per-query rows with the given (recall@10, rr@20); nDCG follows the reciprocal rank."""
    return [
        {"query_id": qid, "answerable": answerable, "recall@10": r, "rr@20": rr, "ndcg@10": rr}
        for qid, (r, rr) in values.items()
    ]


def test_constant_differences_give_a_zero_width_interval() -> None:
    interval = bootstrap_interval([[0.25] * 12])
    assert (interval.mean, interval.low, interval.high, interval.queries) == (0.25, 0.25, 0.25, 12)


def test_two_queries_span_the_whole_range() -> None:
    # Resampled means of [0, 1] are 0, 0.5 or 1 with chances 1/4, 1/2, 1/4.
    interval = bootstrap_interval([[0.0, 1.0]])
    assert (interval.mean, interval.low, interval.high) == (0.5, 0.0, 1.0)


def test_one_improved_query_in_four_is_not_significant() -> None:
    # The mean of 4 draws from [1, 0, 0, 0] is Binomial(4, 1/4) / 4: P(0) = 0.32, so the
    # 2.5th percentile is 0; P(<= 2 / 4) = 0.95 < 0.975 <= P(<= 3 / 4), so the 97.5th is 0.75.
    interval = bootstrap_interval([[1.0, 0.0, 0.0, 0.0]])
    assert (interval.mean, interval.low, interval.high) == (0.25, 0.0, 0.75)


def test_interval_matches_the_normal_approximation_for_many_queries() -> None:
    rng = random.Random(5)
    deltas = [rng.gauss(0.1, 0.5) for _ in range(400)]
    mean = sum(deltas) / len(deltas)
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / (len(deltas) - 1))
    half = 1.96 * sd / math.sqrt(len(deltas))
    interval = bootstrap_interval([deltas])
    assert interval.low == pytest.approx(mean - half, abs=0.006)
    assert interval.high == pytest.approx(mean + half, abs=0.006)


def test_pooling_resamples_within_each_set() -> None:
    # Each set is constant, so a stratified bootstrap has no spread; drawing from the
    # pooled 20 queries together would (any mix of ones and zeros).
    interval = bootstrap_interval([[1.0] * 10, [0.0] * 10])
    assert (interval.mean, interval.low, interval.high, interval.queries) == (0.5, 0.5, 0.5, 20)


def test_seeded_and_deterministic() -> None:
    deltas = [[0.0, 0.5, -0.5, 1.0, 0.0, 0.2, -0.1]]
    assert bootstrap_interval(deltas) == bootstrap_interval(deltas)
    assert bootstrap_interval(deltas, seed=1) != bootstrap_interval(deltas, seed=2)


def test_paired_deltas_need_the_same_queries() -> None:
    a = _rows({"q1": (1, 1), "q2": (0, 0)})
    b = _rows({"q1": (1, 0.5)})
    with pytest.raises(SlackqueryError, match="different queries"):
        paired_deltas("set", a, b)
    # Unanswerable rows carry no relevance metrics and are left out.
    deltas = paired_deltas("set", a[:1] + _rows({"u": (0, 0)}, answerable=False), b)
    assert [(d.metric, d.delta) for d in deltas] == [
        ("recall@10", 0.0),
        ("rr@20", -0.5),
        ("ndcg@10", -0.5),
    ]


def _two_sets(gain_a: int, loss_b: int, size: int = 20) -> dict:
    """Set `x`: `gain_a` of `size` queries go from rank 2 to 1; set `y`: `loss_b` lose theirs."""
    base = {f"q{i}": (1.0, 0.5) for i in range(size)}
    better = {q: (1.0, 1.0 if i < gain_a else 0.5) for i, q in enumerate(base)}
    worse = {q: (1.0, 0.0 if i < loss_b else 0.5) for i, q in enumerate(base)}
    return {
        "x": (_rows(base), _rows(better)),
        "y": (_rows(base), _rows(worse)),
    }


def test_rule_keeps_a_pooled_win_that_no_set_pays_for() -> None:
    comparison = compare("A", "B", _two_sets(gain_a=12, loss_b=1))
    pooled = comparison.intervals[POOLED]["rr@20"]
    assert pooled.queries == 40 and pooled.low > 0
    assert comparison.intervals["y"]["rr@20"].mean == pytest.approx(-0.025)
    decision = decide(comparison)
    assert decision.keep, decision.reasons


def test_rule_rejects_a_win_that_costs_one_set_more_than_one_query() -> None:
    # Set y loses 0.5 on 3 of 20 queries: -0.075 MRR, more than one query's worth (0.05).
    decision = decide(compare("A", "B", _two_sets(gain_a=12, loss_b=3)))
    assert not decision.keep
    assert any("y: MRR@20 falls by 0.075" in reason for reason in decision.reasons)


def test_rule_rejects_what_the_interval_cannot_tell_from_noise() -> None:
    decision = decide(compare("A", "B", _two_sets(gain_a=2, loss_b=0)))
    assert not decision.keep
    assert decision.reasons == ("no pooled interval of R@10 or MRR@20 lies above zero",)


def test_sides_and_configs_parse() -> None:
    assert parse_config("default").is_default
    assert parse_config("rrf_k=60;arm.context=off").overrides == {
        "rrf_k": 60,
        "arm.context": False,
    }
    with pytest.raises(SlackqueryError, match="one value per axis"):
        parse_config("rrf_k=10,60")
    side = parse_side("rrf_k=60")
    assert (side.mode, side.point.name, side.rows_file) == ("hybrid", "rrf_k=60", None)
    assert parse_side("lexical").mode == "lexical"
    side = parse_side("weight.lexical=1;rrf_k=60")
    assert side.mode == "hybrid" and side.point.overrides == {"weight.lexical": 1.0, "rrf_k": 60}
    assert parse_side("hybrid:weight.lexical=1;rrf_k=60").point == side.point
    side = parse_side("runs/e5.jsonl#hybrid:arm.authors=off")
    assert side.rows_file == Path("runs/e5.jsonl") and side.point.name == "arm.authors=off"
    assert parse_side("runs/e5.jsonl").point.is_default
    with pytest.raises(SlackqueryError, match="only hybrid"):
        parse_side("lexical:rrf_k=60")


def test_cli_compares_two_saved_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    files = {}
    for name, rank in (("a", 0.5), ("b", 1.0)):
        rows = [
            {"query_set": qs, "mode": "hybrid", "config": "default", **row}
            for qs in ("beacon", "sample")
            for row in _rows({f"q{i}": (1.0, rank) for i in range(15)})
        ]
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = tmp_path / "compare.md"
    code = main(
        ["eval", "--compare", str(files["a"]), str(files["b"]), "--compare-report", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| pooled    | 30      | +0.000 [+0.000, +0.000] | +0.500 [+0.500, +0.500]" in printed
    assert "Rule: B beats A (pooled MRR@20 interval above zero)" in printed
    assert "| sample    | q14   | 1.00 -> 1.00 | 0.50 -> 1.00" in out.read_text(encoding="utf-8")


def test_cli_rejects_a_baseline_without_a_grid(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    queries = tmp_path / "q.yaml"
    queries.write_text("queries: []\n", encoding="utf-8")
    assert "give --grid" in usage_error(["eval", str(queries), "--baseline", "default"], capsys)


def test_cli_pairs_corpora_with_query_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("", encoding="utf-8")
    files = [str(tmp_path / f"q{i}.yaml") for i in range(3)]
    argv = ["eval", *files, "--corpus", str(corpus), "--corpus", str(corpus)]
    assert "one per query file (3), not 2" in usage_error(argv, capsys)


def test_cli_runs_every_comparison_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [
        {"query_set": "s", "mode": mode, "config": "default", **row}
        for mode, rank in (("lexical", 0.5), ("semantic", 0.25), ("hybrid", 1.0))
        for row in _rows({f"q{i}": (1.0, rank) for i in range(4)})
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    argv = ["eval", "--compare", f"{path}#lexical", f"{path}#hybrid"]
    assert main([*argv, "--compare", f"{path}#semantic", f"{path}#hybrid"]) == 0
    printed = capsys.readouterr().out
    assert f"## {path}#hybrid against {path}#lexical" in printed
    assert "| s         | 4       | +0.000 [+0.000, +0.000] | +0.750 [+0.750, +0.750]" in printed
    assert "| rule keeps |" in printed and printed.rstrip().endswith("| B          |")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"query_set": "s"}\nnot json\n', r"rows.jsonl:2: not a JSON row"),
        ("[1]\n", r"rows.jsonl:1: a row without `query_set`"),
    ],
)
def test_a_malformed_rows_file_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SlackqueryError, match=message):
        read_rows(path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--answers", "--modes", "lexical", "--compare", "ROWS", "ROWS"], "--modes does not"),
        (["--answers", "--report", "r.md", "--compare", "ROWS", "ROWS"], "--report does not"),
        (["--compare", "ROWS", "ROWS", "--rows", "ROWS"], "--rows writes the rows of a run"),
        (["--answers", "--compare-report", "c.md"], "--compare-report writes comparisons"),
        (["--compare", "ROWS", "ROWS", "--corpus", "ROWS"], "--corpus is built for a judged"),
    ],
)
def test_cli_refuses_options_that_would_do_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"query_set": "s", "mode": "hybrid", "config": "default"}) + "\n")
    arguments = [str(rows) if arg == "ROWS" else arg for arg in argv]
    assert message in usage_error(["eval", *arguments], capsys)
    assert rows.stat().st_size > 0  # an input is never overwritten by a refused run


def test_cli_tells_answer_rows_from_retrieval_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    rows = tmp_path / "answers.jsonl"
    rows.write_text(json.dumps({"query_set": "s", "id": "q1", "verdict": "answered"}) + "\n")
    assert main(["eval", "--compare", f"{rows}#hybrid", f"{rows}#hybrid"]) == 1
    assert "answer rows; compare them with --answers --compare" in capsys.readouterr().err


def test_a_corpus_shared_by_query_files_is_built_by_the_first(tmp_path: Path) -> None:
    corpus, other = tmp_path / "a.zip", tmp_path / "b.zip"
    sets = [("q1", None, corpus), ("q2", None, tmp_path / "." / "a.zip"), ("q3", None, other)]
    assert first_uses(sets) == [True, False, True]
    assert first_uses([("q1", None, None)]) == [False]


def _rows_file(path: Path, rank: float, **made: object) -> Path:
    """A saved hybrid run over 15 queries, each row tagged with `made` (its protocol)."""
    rows = [
        {"query_set": "beacon", "mode": "hybrid", "config": "default", **made, **row}
        for row in _rows({f"q{i}": (1.0, rank) for i in range(15)})
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_cli_refuses_to_pair_a_run_with_filters_and_one_without(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    made = {"generation_id": "g1", "build_id": "b1"}
    a = _rows_file(tmp_path / "a.jsonl", 0.5, filters_sent=True, **made)
    b = _rows_file(tmp_path / "b.jsonl", 1.0, filters_sent=False, **made)
    assert main(["eval", "--compare", str(a), str(b)]) == 1
    assert capsys.readouterr().err == (
        f"error: --compare: '{a}' ran with the queries' filters and '{b}' with --no-filters: "
        "compare runs that sent the same filters\n"
    )


def test_cli_names_another_generation_and_rows_that_do_not_say(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    a = _rows_file(tmp_path / "a.jsonl", 0.5, filters_sent=False, generation_id="e5")
    b = _rows_file(tmp_path / "b.jsonl", 1.0, filters_sent=False, generation_id="pair")
    assert main(["eval", "--compare", str(a), str(b), "--json", "-"]) == 0
    (comparison,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert comparison["notes"] == [
        "the runs come from different embedding generations: A e5; B pair"
    ]
    old = _rows_file(tmp_path / "old.jsonl", 0.5)
    assert main(["eval", "--compare", str(old), str(b)]) == 0
    assert (
        f"Note: {old}: the rows do not record whether filters were sent (saved before rows "
        "did); make sure both runs sent the same filters."
    ) in capsys.readouterr().out
