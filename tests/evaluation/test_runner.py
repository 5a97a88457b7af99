"""The runner's pieces that need no built corpus, and the `eval` command's input checks."""

import datetime as dt
import hashlib
import json
from collections.abc import Callable
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
from tests.commands.usage import usage_error
from tests.evaluation.conftest import BUILD_ID, GENERATION_ID

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


def test_corpus_home_is_dedicated_and_keeps_embedding_settings(
    settings: Settings, tmp_path: Path
) -> None:
    corpus = tmp_path / "beacon" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text('{"local_id": "1"}\n', encoding="utf-8")
    evaluated = runner.corpus_settings(settings, corpus)
    home = (
        settings.home
        / "eval"
        / f"beacon-corpus-{hashlib.sha256(corpus.read_bytes()).hexdigest()[:12]}"
    )
    assert evaluated.home == home
    assert evaluated.state_path == home / "state.duckdb"
    assert evaluated.artifact_path.parent == evaluated.home
    assert evaluated.embedding_model == settings.embedding_model


def test_an_edited_corpus_gets_a_home_of_its_own(settings: Settings, tmp_path: Path) -> None:
    # Re-importing a shorter file into the old home kept every message of the days it
    # lacked: a 300-line corpus was evaluated over 2,162 messages.
    corpus = tmp_path / "beacon" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text('{"local_id": "1"}\n{"local_id": "2"}\n', encoding="utf-8")
    first = runner.corpus_settings(settings, corpus).home
    assert runner.corpus_settings(settings, corpus).home == first  # its state is found again
    corpus.write_text('{"local_id": "1"}\n', encoding="utf-8")
    assert runner.corpus_settings(settings, corpus).home != first
    assert runner.corpus_settings(settings, corpus).home.name.startswith("beacon-corpus-")


def test_an_export_folder_is_named_by_every_file_in_it(settings: Settings, tmp_path: Path) -> None:
    export = tmp_path / "export"
    (export / "general").mkdir(parents=True)
    (export / "users.json").write_text("[]", encoding="utf-8")
    day = export / "general" / "2026-09-01.json"
    day.write_text("[]", encoding="utf-8")
    first = runner.corpus_settings(settings, export).home
    day.write_text('[{"ts": "1"}]', encoding="utf-8")
    assert runner.corpus_settings(settings, export).home != first
    with pytest.raises(SlackqueryError, match="corpus not found"):
        runner.corpus_settings(settings, tmp_path / "missing.zip")


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


def test_missing_judged_messages_are_warned_about_before_any_run(
    settings: Settings, publish_ids: Callable[..., Path]
) -> None:
    artifact = publish_ids("synthetic:eng:1", "synthetic:eng:2")
    graded = _query(
        id="Q43",
        evidence_groups=(EvidenceGroup("p1", ("synthetic:eng:1",)),),
        relevant={"synthetic:eng:1": 3, "synthetic:eng:9": 1},
    )
    found = _query(id="Q44", evidence_groups=(EvidenceGroup("p1", ("synthetic:eng:2",)),))
    said: list[str] = []
    info, warnings = runner.inspect_artifact(
        settings, artifact, [_query(), graded, found], said.append
    )
    assert (info["message_count"], info["path"]) == (2, str(artifact))
    assert said == [
        f"artifact {BUILD_ID}: 2 messages",
        "warning: 2 of 3 queries judge 2 message(s) the artifact does not hold "
        "(synthetic:build-help:20260928-01, synthetic:eng:9): their recall or nDCG cannot "
        "reach 1. Do the queries match the corpus? (per query: the warnings of the report "
        "and of --json)",
    ]
    assert warnings == [
        "query Q42: 1 judged message(s) not in the artifact: synthetic:build-help:20260928-01",
        "query Q43: 1 judged message(s) not in the artifact: synthetic:eng:9",
    ]


def test_the_warning_names_the_first_three_ids() -> None:
    missing = {"Q1": ["m1", "m2"], "Q2": ["m3", "m4"]}
    assert runner.missing_summary(missing, 5).startswith(
        "2 of 5 queries judge 4 message(s) the artifact does not hold (m1, m2, m3 ...)"
    )


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
    for option, refusal in (
        (["--modes", "dense"], "--modes: expected a comma-separated subset"),
        (["--grid", "rrf=1"], "unknown axis 'rrf'"),
        (["--baseline", "lexical"], "--baseline compares a grid: give --grid"),
    ):
        assert refusal in usage_error(["eval", str(queries), *option], capsys)
    # A grid file's mistakes are the file's: a plain error, no usage.
    assert main(["eval", str(queries), "--grid", str(tmp_path / "missing.yaml")]) == 1
    assert capsys.readouterr().err.startswith("error: ")
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


class NoHits:
    """A search engine that finds nothing: what is tested is the run around it."""

    def __init__(self, settings: Settings) -> None:
        self.query_embedder = SimpleNamespace(forget=lambda: None)

    def search(self, request: object, fusion: object = None) -> object:
        return SimpleNamespace(results=[], timings_ms={})

    def close(self) -> None:
        pass


def test_a_run_warns_on_stderr_first_and_records_how_it_was_made(
    tmp_path: Path,
    settings: Settings,
    publish_ids: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    publish_ids("m2")
    monkeypatch.setattr(runner, "SearchEngine", NoHits)
    out = tmp_path / "out"
    argv = ["eval", str(_queries_file(tmp_path)), "--modes", "lexical", "--no-filters"]
    argv += ["--json", str(out / "run.json"), "--rows", str(out / "rows.jsonl")]
    assert main([*argv, "--report", str(out / "run.md")]) == 0
    printed = capsys.readouterr()
    assert "warning" not in printed.out
    progress = printed.err.splitlines()
    assert progress[:2] == [
        f"eval: artifact {BUILD_ID}: 1 messages",
        "eval: warning: 1 of 1 queries judge 1 message(s) the artifact does not hold (m1): "
        "their recall or nDCG cannot reach 1. Do the queries match the corpus? (per query: "
        "the warnings of the report and of --json)",
    ]
    assert progress[2].startswith("eval: warm up lexical")
    document = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert document["warnings"] == ["query Q1: 1 judged message(s) not in the artifact: m1"]
    assert f"generation `{GENERATION_ID}`, 1 messages" in (out / "run.md").read_text(
        encoding="utf-8"
    )
    (row,) = [
        json.loads(line) for line in (out / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert (row["filters_sent"], row["generation_id"], row["build_id"]) == (
        False,
        GENERATION_ID,
        BUILD_ID,
    )


def test_cli_refuses_an_empty_grid(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    queries = str(_queries_file(tmp_path))
    error = usage_error(["eval", queries, "--grid", ""], capsys)
    assert error == "slackquery eval: error: --grid: empty grid spec"
    assert "--grid does not apply" in usage_error(
        ["eval", queries, "--answers", "--grid", ""], capsys
    )
