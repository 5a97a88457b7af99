"""Benchmark scripts: their figures are the only thing on stdout, they leave nothing behind,
and a value they cannot use is a usage error before any work."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *arguments: str, scratch: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["TMPDIR"] = str(scratch)
    command = [sys.executable, str(ROOT / "benchmarks" / script), *arguments]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_bench_prints_only_json_and_removes_what_it_generated(tmp_path: Path) -> None:
    finished = _run("import_bench.py", "--sample", "200", "--json", scratch=tmp_path)
    assert finished.returncode == 0, finished.stderr
    figures = json.loads(finished.stdout)  # the generator's report went to stderr
    assert figures["messages"] == 200 and figures["reimport_changed"] is False
    # docs/performance.md: every benchmark reports the load average it ran under.
    assert {"load_average_1m_before", "load_average_1m_after"} <= set(figures)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("script", "arguments", "message"),
    [
        ("import_bench.py", [], "give PATH, --sample N or --synthetic N"),
        ("import_bench.py", ["--sample", "5"], "'5' is not a whole number of at least 100"),
        ("embed_bench.py", ["--docs", "0"], "'0' is not a whole number of at least 1"),
        ("embed_bench.py", ["--only", "bogus"], "unknown part(s) bogus; choose from in_process"),
        ("embed_bench.py", ["--dask-workers", "1,-2"], "'-2' is not a whole number"),
    ],
)
def test_a_value_the_benchmark_cannot_use_is_a_usage_error(
    tmp_path: Path, script: str, arguments: list[str], message: str
) -> None:
    finished = _run(script, *arguments, scratch=tmp_path)
    assert finished.returncode == 2 and message in finished.stderr
