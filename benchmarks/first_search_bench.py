"""Time to first search: a fresh N-message export imported, projected, built, published
with no vectors yet, then searched, each step a new `slackquery` process as a user runs it.

`SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE=0` lets the first artifact publish before any
message is embedded (lexical search covers everything at once). The export is generated
first (not timed; kept in --folder for the next run); the home is fresh every run. Then the
cold CLI search is repeated (new process, page cache warm). Prints per-step seconds, the
total and the 1-minute load average before and after.

Run: `python benchmarks/first_search_bench.py --messages 1000000 --folder /tmp/fs`.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLI = str(Path(sys.executable).with_name("slackquery"))
QUERY = "deploy rollback error"


def timed(args: list[str], env: dict[str, str]) -> float:
    """Seconds one `slackquery` command takes; its output is checked, then dropped."""
    started = time.perf_counter()
    subprocess.run([CLI, *args], env=env, check=True, capture_output=True)
    return round(time.perf_counter() - started, 2)


def run(messages: int, folder: Path, cold_searches: int) -> dict[str, Any]:
    export = folder / f"export-{messages}.zip"
    if not export.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [CLI, "sample", "--messages", str(messages), "--out", str(export)],
            check=True,
            capture_output=True,
        )
    home = folder / f"home-{messages}"
    shutil.rmtree(home, ignore_errors=True)
    env = {
        **os.environ,
        "SLACKQUERY_HOME": str(home),
        "SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE": "0",
    }
    report: dict[str, Any] = {
        "messages": messages,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    steps = {
        "import": ["import", str(export)],
        "project": ["project"],
        "build": ["build"],
        "publish": ["publish", "latest"],
        "first_search": ["search", QUERY, "--mode", "lexical", "--json"],
    }
    for name, args in steps.items():
        report[f"{name}_s"] = timed(args, env)
    report["total_s"] = round(sum(report[f"{name}_s"] for name in steps), 1)
    search = steps["first_search"]
    report["cold_search_s"] = [timed(search, env) for _ in range(cold_searches)]
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, required=True, help="export and home go here")
    parser.add_argument("--cold-searches", type=int, default=5)
    args = parser.parse_args()
    json.dump(run(args.messages, args.folder, args.cold_searches), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
