"""`slackquery bench` prints the report's headline figures; `--json` the whole report; an
unknown `--as` user is named in the benchmark's own sample."""

from types import SimpleNamespace
from typing import Any

import pytest

from slackquery.cli import build_parser, main
from slackquery.commands import bench
from slackquery.commands.bench import MIN_QUERIES, _load_benchmark, render
from slackquery.errors import SlackqueryError


def timings(p50: float, p95: float, peak: float) -> dict[str, dict[str, float]]:
    figures = {"p50": p50, "p95": p95, "max": peak}
    return {
        "total_ms": figures,
        "excluding_embedding_ms": figures,
        "with_page_excluding_embedding_ms": {key: value + 0.5 for key, value in figures.items()},
    }


def report(**extra: Any) -> dict[str, Any]:
    hybrid = {"hybrid": timings(20.0, 27.0, 30.0)}
    return {
        "messages": 1_000_000,
        "artifact_counts": {"document_count": 1_058_680, "vector_count": 984_175},
        "queries": 200,
        "load_average_1m_before": 0.7,
        "load_average_1m_after_timing": 0.8,
        "build_s": 124.6,
        "load_s": 0.05,
        "random_query_vectors": {"lexical": timings(1.1, 1.6, 3.3), **hybrid},
        "default_model_query_embedding": {"hybrid": timings(28.2, 38.5, 49.9)},
        "two_part_questions": {"random_query_vectors": hybrid},
        "cold_cli_search": {
            "hybrid_building_the_model_graphs": {"s": 1.68},
            "lexical": {"s": [0.52, 0.49]},
            "hybrid": {"s": [0.86, 0.83]},
        },
        **extra,
    }


def test_the_headline_figures_are_printed() -> None:
    text = render(report())
    assert "1,000,000 messages: 1,058,680 documents, 984,175 seeded vectors" in text
    assert "  lexical   1.10 / 1.60 / 3.30  (1.60 / 2.10 / 3.80)" in text
    assert "hybrid with the default model's query embedding: 28.20 / 38.50 / 49.90" in text
    assert "lexical 0.49-0.52; hybrid 0.83-0.86; the first after an install 1.68" in text
    assert "MCP clients" not in text and "as " not in text.split("\n")[-1]


def test_throughput_and_requester_figures_when_measured() -> None:
    throughput = {
        "clients": 8,
        "queries_per_s": 49.2,
        "latency_ms": {"p95": 255.5},
        "errors": 0,
        "requests": 400,
        "server_ready_s": 1.26,
        "server_rss_after_load_mib": 141.5,
    }
    requester = {"requester": "T1:U2:all", "p95_change_pct": {"lexical": 3.5, "hybrid": -1.2}}
    text = render(report(throughput=throughput, as_requester=requester))
    assert "8 MCP clients: 49.2 queries/s, p95 255.5 ms, 0 errors of 400" in text
    assert "server ready in 1.26 s at 141.5 MiB" in text
    assert "as T1:U2:all" in text and "  lexical   +3.5%" in text and "  hybrid    -1.2%" in text


def test_help_and_check_agree_on_the_fewest_queries(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser("bench")
    assert parser.parse_args(["bench", "--queries", str(MIN_QUERIES)]).queries == MIN_QUERIES
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--queries", str(MIN_QUERIES - 1)])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"at least {MIN_QUERIES} varied queries" in help_text
    assert f"distinct queries per mode (at least {MIN_QUERIES}, the default)" in help_text


def test_the_benchmark_refuses_no_queries_before_building_a_corpus() -> None:
    with pytest.raises(ValueError, match=f"need at least {MIN_QUERIES} queries"):
        _load_benchmark().run_benchmark(1000, 0, 0)


def test_an_unknown_as_user_is_named_in_the_benchmarks_own_sample(
    home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--as` is resolved by serving, whose message speaks of the published artifact; the
    # benchmark builds a sample of its own and never reads the user's artifact.
    def run_benchmark(*args: Any, **options: Any) -> dict[str, Any]:
        raise SlackqueryError(f"unknown user {options['as_user']!r} in the published artifact")

    monkeypatch.setattr(
        bench, "_load_benchmark", lambda: SimpleNamespace(run_benchmark=run_benchmark)
    )
    assert main(["bench", "--messages", "1000", "--as", "@nobody"]) == 1
    assert capsys.readouterr().err == (
        "error: unknown user '@nobody' in the benchmark's 1,000-message sample workspace\n"
    )
