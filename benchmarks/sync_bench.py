"""Benchmark `slackquery sync` against the loopback Slack Web API, pacing off.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/sync_bench.py --messages 10000 [--page-size 200]

Generates the sample workspace (`slackquery sample`), serves it with the test server
(`python -m tests.slack.server`, a separate process), and runs `slackquery sync --json`
into a fresh SLACKQUERY_HOME under `/usr/bin/time -v`: wall time, requests (per method and
per 1,000 messages) and the sync process's peak RSS. Then `sync --plan` for 100,000.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slackquery.sample import generate_sample
from tests.slack.server import TOKEN

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError("the test server did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--page-size", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        sample = generate_sample(work / "sample.zip", messages=args.messages)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.slack.server", sample["path"], str(port)], cwd=ROOT
        )
        try:
            wait_for(port)
            env = {
                **os.environ,
                "SLACKQUERY_HOME": str(work / "home"),
                "SLACKQUERY_SLACK_TOKEN": TOKEN,
                "SLACKQUERY_SLACK_API_URL": f"http://127.0.0.1:{port}/api",
                "SLACKQUERY_SLACK_REQUESTS_PER_MINUTE": "0",
                "SLACKQUERY_SLACK_PAGE_SIZE": str(args.page_size),
            }
            command = ["/usr/bin/time", "-v", sys.executable, "-m", "slackquery.cli"]
            started = time.perf_counter()
            run = subprocess.run(
                [*command, "sync", "--json"], env=env, capture_output=True, text=True, check=True
            )
            wall_s = time.perf_counter() - started
            plan = subprocess.run(
                [sys.executable, "-m", "slackquery.cli", "sync", "--plan"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        finally:
            server.terminate()
            server.wait()
    report = json.loads(run.stdout)
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr)[1])
    messages = report["counts"]["messages"]["inserted"]
    figures = {
        "messages": messages,
        "page_size": args.page_size,
        "wall_s": round(wall_s, 1),
        "sync_duration_s": report["duration_s"],
        "requests": report["requests"],
        "request_count": report["request_count"],
        "requests_per_1000_messages": round(report["request_count"] * 1000 / messages, 1),
        "peak_rss_mib": round(peak_kib / 1024),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    print(json.dumps(figures, indent=2))
    print(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
