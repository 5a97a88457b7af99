"""The runner's pieces that need no built corpus, and the `eval` command's input checks."""

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest

from slackquery.cli import main
from slackquery.commands.eval import default_report_path, judged_queries
from slackquery.errors import SlackqueryError
from slackquery.evaluation import runner
from slackquery.evaluation.grid import GridPoint
from slackquery.evaluation.queries import (
    EvidenceGroup,
    JudgedQuery,
    QueryFilters,
    without_filters,
)
from slackquery.settings import Settings

IST = dt.timezone(dt.timedelta(hours=5, minutes=30))


def _query(**changes: object) -> JudgedQuery:
    values: dict = {
        "id": "Q42",
        "split": "dev",
        "query": "What did Nikhil say about the dashboard error?",
        "answerable": True,
        "evidence_groups": (EvidenceGroup("p1", ("synthetic:build-help:20260928-01",)),),
        "filters": QueryFilters(
            channel="build-help",
            author="nikhil",
            after=dt.date(2026, 9, 28),
            before=dt.date(2026, 9, 29),
        ),
        "request_time": dt.datetime(2026, 10, 5, 10, tzinfo=IST),
    }
    values.update(changes)
    return JudgedQuery(**values)


def test_corpus_home_is_dedicated_and_keeps_embedding_settings(settings: Settings) -> None:
    corpus = Path("/data/beacon/corpus.jsonl")
    evaluated = runner.corpus_settings(settings, corpus)
    assert evaluated.home == settings.home / "eval" / "beacon-corpus"
    assert evaluated.state_path == settings.home / "eval" / "beacon-corpus" / "state.duckdb"
    assert evaluated.artifact_path.parent == evaluated.home
    assert evaluated.embedding_model == settings.embedding_model


def test_fusion_config_changes_only_the_named_axes() -> None:
    base = runner.FusionConfig(disabled_arms=frozenset())
    config = runner.fusion_config(
        GridPoint("x", {"rrf_k": 10, "arm.context": False, "answer_cue_boost": 0.0}), base
    )
    assert (config.rrf_k, config.disabled_arms, config.answer_cue_boost) == (
        10,
        frozenset({"context"}),
        0.0,
    )
    assert config.route_weights == base.route_weights
    assert config.candidate_window == base.candidate_window

    everywhere = runner.fusion_config(GridPoint("w", {"weight.semantic": 2.0}), base)
    for route in ("exact", "conceptual", "mixed"):
        assert everywhere.weights(route) == {**base.weights(route), "semantic": 2.0}

    one = runner.fusion_config(GridPoint("e", {"weight.exact.aspects": 0.0}), base)
    assert one.weights("exact") == {**base.weights("exact"), "aspects": 0.0}
    assert one.weights("mixed") == base.weights("mixed")

    back_on = runner.fusion_config(GridPoint("on", {"arm.context": True}), config)
    assert back_on.disabled_arms == frozenset()


def test_request_carries_filters_as_names_and_bounds() -> None:
    request = runner.build_request(_query(), "hybrid")
    assert request.mode == "hybrid"
    assert request.limit == 20
    assert request.channel_ids == ["#build-help"]
    assert request.author_ids == ["@nikhil"]
    start = dt.datetime(2026, 9, 28, tzinfo=IST)
    assert request.start_ts_us == int(start.timestamp()) * 1_000_000
    assert request.end_ts_us == int(start.timestamp() + 86_400) * 1_000_000 - 1
    plain = runner.build_request(_query(filters=QueryFilters()), "lexical")
    assert plain.channel_ids is None and plain.start_ts_us is None


def test_no_filters_sends_the_text_alone(tmp_path: Path) -> None:
    (stripped,) = without_filters([_query()])
    request = runner.build_request(stripped, "hybrid")
    assert request.query == _query().query
    assert (request.channel_ids, request.author_ids) == (None, None)
    assert (request.start_ts_us, request.end_ts_us) == (None, None)
    assert stripped == _query(filters=QueryFilters())

    path = tmp_path / "filtered.yaml"
    path.write_text(
        "queries:\n- id: Q1\n  split: dev\n  query: dashboard error\n  answerable: true\n"
        "  evidence_groups:\n  - part: p1\n    message_ids: [m1]\n"
        "  filters: {channel: build-help, author: nikhil, after: '2026-09-28'}\n",
        encoding="utf-8",
    )
    as_given = judged_queries(SimpleNamespace(split="all", no_filters=False), path)
    assert as_given[0].filters == QueryFilters("build-help", "nikhil", dt.date(2026, 9, 28))
    alone = judged_queries(SimpleNamespace(split="all", no_filters=True), path)
    assert alone[0].filters.is_empty() and alone[0].query == "dashboard error"


def test_search_errors_become_recorded_misses() -> None:
    class Refusing:
        def search(self, request: object, fusion: object = None) -> object:
            raise SlackqueryError("query has no searchable tokens")

    run, timings = runner.run_query(
        Refusing(), runner.build_request(_query(), "lexical"), _query(), None
    )
    assert run.error == "query has no searchable tokens"
    assert run.ranking == () and timings == {}


def test_hits_are_matched_by_source_message_id() -> None:
    hits = [
        SimpleNamespace(
            source_message_id="synthetic:eng:1",
            document_id="W:C:1",
            fused_score=0.03,
            semantic=SimpleNamespace(rank=1, score=0.8),
        ),
        SimpleNamespace(
            source_message_id=None, document_id="W:C:2", fused_score=0.02, semantic=None
        ),
    ]

    class Answering:
        def search(self, request: object, fusion: object = None) -> object:
            return SimpleNamespace(results=hits, timings_ms={"embed": 12.5, "total": 20.0})

    run, timings = runner.run_query(
        Answering(), runner.build_request(_query(), "hybrid"), _query(), None
    )
    assert run.ranking == ("synthetic:eng:1", "W:C:2")
    assert run.scores == (0.03, 0.02)
    assert timings["embed"] == 12.5
    assert run.top_cosine == pytest.approx(0.8)


def test_missing_evidence_is_reported_per_query() -> None:
    warnings = runner.missing_evidence_warnings([_query()], {"synthetic:eng:1"})
    assert warnings == [
        "query Q42: 1 evidence message(s) not in the artifact: synthetic:build-help:20260928-01"
    ]
    assert runner.missing_evidence_warnings([_query()], {"synthetic:build-help:20260928-01"}) == []


def _queries_file(tmp_path: Path) -> Path:
    path = tmp_path / "q.yaml"
    path.write_text(
        "queries:\n- id: Q1\n  split: dev\n  query: database switch\n  answerable: true\n"
        "  evidence_groups:\n  - part: p1\n    message_ids: [m1]\n",
        encoding="utf-8",
    )
    return path


def test_cli_rejects_bad_modes_and_grids(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = _queries_file(tmp_path)
    assert main(["eval", str(queries), "--modes", "dense"]) == 1
    assert "--modes: expected a comma-separated subset" in capsys.readouterr().err
    assert main(["eval", str(queries), "--grid", "rrf=1"]) == 1
    assert "unknown axis 'rrf'" in capsys.readouterr().err
    assert main(["eval", str(queries), "--split", "test"]) == 1
    assert "no queries in split 'test'" in capsys.readouterr().err


def test_cli_without_artifact_says_what_to_do(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(_queries_file(tmp_path))]) == 1
    assert "no published search artifact" in capsys.readouterr().err


def test_every_run_writes_a_report_by_default_under_the_home(settings: Settings) -> None:
    queries = Path("/data/beacon/queries-dev.yaml")
    expected = settings.home / "eval" / "reports" / "queries-dev.md"
    assert default_report_path(settings, queries) == expected
