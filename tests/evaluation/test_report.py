"""Report writers, driven by synthetic rankings (no search engine involved)."""

import json
from pathlib import Path

from slackquery.evaluation.metrics import QueryRun, query_row
from slackquery.evaluation.queries import EvidenceGroup, JudgedQuery
from slackquery.evaluation.report import (
    Evaluation,
    RunGroup,
    render_markdown,
    to_json,
    write_json,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _query(query_id: str, split: str, evidence: tuple[str, ...]) -> JudgedQuery:
    return JudgedQuery(
        id=query_id,
        split=split,
        query=f"question {query_id}",
        answerable=bool(evidence),
        evidence_groups=(EvidenceGroup("p1", evidence),) if evidence else (),
        relevant={mid: 3 for mid in evidence},
        type="fact" if evidence else "unanswerable",
    )


QUERIES = [
    _query("Q1", "dev", ("m1",)),
    _query("Q2", "dev", ("m2",)),
    _query("Q3", "test", ("m3",)),
    _query("Q4", "dev", ()),
]


def _group(mode: str, config: str, hit_rank: int, overrides: dict | None = None) -> RunGroup:
    """Every answerable query finds its evidence at `hit_rank` (0 = never)."""
    rows = []
    for index, query in enumerate(QUERIES):
        ranking = [f"noise{i}" for i in range(20)]
        if query.answerable and hit_rank:
            ranking[hit_rank - 1] = next(iter(query.evidence_ids))
        scores = tuple(0.03 / (i + 1) for i in range(20))
        run = QueryRun(query, tuple(ranking), scores, latency_ms=10.0 + index)
        rows.append(query_row(run))
    return RunGroup(mode, config, overrides or {}, rows)


def _evaluation() -> Evaluation:
    return Evaluation(
        queries_file="queries.yaml",
        split="all",
        groups=[
            _group("lexical", "default", 12),
            _group("semantic", "default", 2),
            _group("hybrid", "default", 1),
            _group("hybrid", "rrf_k=10", 3, {"rrf_k": 10}),
            _group("hybrid", "weights=1:1:0", 0, {"weights": (1.0, 1.0, 0.0)}),
        ],
        artifact={"build_id": "b1", "generation_id": "g1"},
        warnings=["query Q9: 1 evidence message(s) not in the artifact: m9"],
    )


def test_json_has_one_result_per_mode_config_and_split() -> None:
    document = to_json(_evaluation())
    results = {(r["mode"], r["config"], r["split"]): r for r in document["results"]}
    assert len(results) == 5 * 3  # dev, test, all
    hybrid = results[("hybrid", "default", "dev")]["metrics"]
    assert hybrid["recall@10"] == 1.0
    assert hybrid["mrr@20"] == 1.0
    assert hybrid["answerable"] == 2 and hybrid["unanswerable"] == 1
    lexical = results[("lexical", "default", "all")]["metrics"]
    assert lexical["recall@10"] == 0.0 and lexical["recall@20"] == 1.0
    assert lexical["mrr@20"] == 1 / 12
    assert results[("hybrid", "weights=1:1:0", "all")]["overrides"] == {"weights": [1.0, 1.0, 0.0]}
    json.dumps(document)


def test_report_writes_markdown_plot_and_rows(tmp_path: Path) -> None:
    evaluation = _evaluation()
    written = write_report(evaluation, tmp_path / "out" / "report.md")
    report = written["report"].read_text(encoding="utf-8")
    assert "| hybrid   | dev   | 2+1" in report
    assert "**default**" in report  # the default row of the grid table is marked
    assert "![Recall@10 and MRR@20 per configuration](report.png)" in report
    assert "`report.jsonl`" in report
    assert "query Q9: 1 evidence message(s)" in report
    assert written["plot"].read_bytes().startswith(PNG_MAGIC)
    rows = [json.loads(line) for line in written["rows"].read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 5 * len(QUERIES)
    first = rows[0]
    assert (first["mode"], first["config"], first["query_id"]) == ("lexical", "default", "Q1")
    assert first["evidence_ranks"] == [12]
    # Query texts and ids: a folder made for them is private, as the home's (umask 022 gave 0755).
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o700


def test_without_grid_the_plot_compares_modes(tmp_path: Path) -> None:
    evaluation = _evaluation()
    evaluation.groups = evaluation.groups[:3]
    assert evaluation.grid_groups() == []
    markdown = render_markdown(evaluation)
    assert "Fusion grid" not in markdown
    written = write_report(evaluation, tmp_path / "r.md")
    assert written["plot"].read_bytes().startswith(PNG_MAGIC)


def test_report_says_whether_the_filters_were_sent() -> None:
    evaluation = _evaluation()
    assert "- Filters: as the query file gives them" in render_markdown(evaluation)
    assert to_json(evaluation)["filters_sent"] is True
    evaluation.filters_sent = False
    assert "- Filters: none (`--no-filters`)" in render_markdown(evaluation)
    assert to_json(evaluation)["filters_sent"] is False


def test_write_json(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    write_json(_evaluation(), path)
    assert json.loads(path.read_text(encoding="utf-8"))["artifact"]["build_id"] == "b1"
