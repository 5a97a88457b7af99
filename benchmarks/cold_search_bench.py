"""Cold `slackquery search`: a new process per search over an artifact already published
(page cache warm), in each mode, with its peak RSS.

Hybrid and semantic searches load the query model in-process; the first one with an empty
model cache (`SLACKQUERY_MODEL_CACHE_DIR`) also hashes the weights and builds the graphs and
e5's piece index, and is reported apart. Prints the seconds and peak RSS of every search and the
1-minute load average before and after.

Run: `python -m benchmarks.cold_search_bench --home DIR` (DIR: a home with a published
artifact, e.g. the serving benchmark's `--folder`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.first_search_bench import CLI, QUERY  # the same command and query


def timed_search(mode: str, env: dict[str, str]) -> dict[str, float]:
    """Seconds and peak RSS (MiB) of one `slackquery search` process; its exit is checked."""
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(
            [CLI, "search", QUERY, "--mode", mode, "--json"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        _pid, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise SystemExit(f"search failed: {errors.read().decode(errors='replace')}")
    return {"s": round(seconds, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def run(home: Path, repeats: int, modes: list[str]) -> dict[str, Any]:
    env = {**os.environ, "SLACKQUERY_HOME": str(home)}
    report: dict[str, Any] = {
        "home": str(home),
        "query": QUERY,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    with tempfile.TemporaryDirectory(prefix="slackquery-model-cache-") as empty:
        fresh = {**env, "SLACKQUERY_MODEL_CACHE_DIR": empty}
        report["hybrid_building_the_model_graphs"] = timed_search("hybrid", fresh)
    for mode in modes:
        timed_search(mode, env)  # the model's graphs kept, the page cache warm
        searches = [timed_search(mode, env) for _ in range(repeats)]
        report[mode] = {key: [search[key] for search in searches] for key in ("s", "peak_rss_mib")}
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a home with a published artifact")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--modes", nargs="+", default=["lexical", "hybrid"])
    args = parser.parse_args()
    json.dump(run(args.home, args.repeats, args.modes), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
