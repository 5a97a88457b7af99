"""Benchmark `slackquery import`: messages per second end to end, and peak memory.

Usage:
    .venv/bin/python benchmarks/import_bench.py PATH.zip            # an existing export
    .venv/bin/python benchmarks/import_bench.py --sample 1000000    # `slackquery sample` first
    .venv/bin/python benchmarks/import_bench.py --synthetic 100000  # quick built-in export

Imports into a fresh temporary SLACKQUERY_HOME, then imports the same input again (the
idempotent path, which must change nothing). Peak memory is the process's maximum RSS
(`ru_maxrss`, which includes DuckDB's native memory), cross-checked by psutil sampling.
Targets (issue 2): >= 25,000 messages/s and < 3 GiB peak for the 1,000,000-message sample.
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import psutil

from slackquery.canonical.importer import import_source
from slackquery.commands import whole_number
from slackquery.settings import Settings

TARGET_MESSAGES_PER_S = 25_000
TARGET_PEAK_BYTES = 3 * 1024**3


def synthetic_export(path: Path, messages: int, *, seed: int = 7) -> Path:
    """A plain export of `messages` messages over 8 channels, ~500 per day file, with threads."""
    rng = random.Random(seed)
    words = [f"w{index}" for index in range(5000)] + ["deploy", "ERR-42", "v2.3.1", "28P01"]
    users = [
        {
            "id": f"U{index:04d}",
            "team_id": "TBENCH",
            "name": f"user{index}",
            "profile": {"display_name": f"User {index}"},
        }
        for index in range(50)
    ]
    channels = [
        {"id": f"C{index:03d}", "name": f"chan-{index}", "created": 1_600_000_000}
        for index in range(8)
    ]
    per_day = 500
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("users.json", json.dumps(users))
        archive.writestr("channels.json", json.dumps(channels))
        written = 0
        day = 0
        while written < messages:
            for channel in channels:
                count = min(per_day, messages - written)
                if count <= 0:
                    break
                base = 1_600_000_000 + day * 86_400
                batch = []
                parent = None
                for index in range(count):
                    ts = f"{base + index * 17}.{rng.randrange(1_000_000):06d}"
                    message = {
                        "type": "message",
                        "user": rng.choice(users)["id"],
                        "text": " ".join(rng.choices(words, k=rng.randint(5, 40))),
                        "ts": ts,
                        "client_msg_id": f"{day}-{index}",
                    }
                    if parent and rng.random() < 0.3:
                        message["thread_ts"] = parent
                    elif rng.random() < 0.05:
                        parent = ts
                        message["thread_ts"] = ts
                        message["reply_count"] = 3
                    if rng.random() < 0.1:
                        message["reactions"] = [{"name": "eyes", "count": 1, "users": ["U0001"]}]
                    batch.append(message)
                date = time.strftime("%Y-%m-%d", time.gmtime(base))
                archive.writestr(f"{channel['name']}/{date}.json", json.dumps(batch))
                written += count
            day += 1
    return path


class RssSampler(threading.Thread):
    """Samples this process's RSS every 50 ms (a cross-check of ru_maxrss)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stopped = threading.Event()
        self.process = psutil.Process()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            self.peak = max(self.peak, self.process.memory_info().rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", type=Path, help="export ZIP or folder to import")
    parser.add_argument(
        "--sample",
        type=whole_number(100),
        metavar="N",
        help="generate an N-message export with `slackquery sample` first",
    )
    parser.add_argument(
        "--synthetic",
        type=whole_number(1),
        metavar="N",
        help="generate a plain synthetic N-message export first",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.path is None and not args.sample and not args.synthetic:
        parser.error("give PATH, --sample N or --synthetic N")
    # The generated export and the home it is imported into: gigabytes at 1M messages.
    with tempfile.TemporaryDirectory(prefix="import-bench-") as scratch:
        figures = measure(args, Path(scratch))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:>22}: {value}")
    return 0


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """Import the input twice into a home under `workdir`; the figures."""
    path = args.path
    if args.sample:
        path = workdir / "sample.zip"
        # The generator's report goes to stderr: stdout carries only the figures (--json).
        subprocess.run(
            [
                sys.executable,
                "-m",
                "slackquery.cli",
                "sample",
                "--messages",
                str(args.sample),
                "--out",
                str(path),
            ],
            check=True,
            stdout=sys.stderr,
        )
    elif args.synthetic:
        path = synthetic_export(workdir / "synthetic.zip", args.synthetic)
    settings = Settings(home=workdir / "home")
    load_before = round(os.getloadavg()[0], 2)
    sampler = RssSampler()
    sampler.start()
    started = time.perf_counter()
    first = import_source(settings, path)
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    second = import_source(settings, path)
    second_s = time.perf_counter() - started
    sampler.stopped.set()
    sampler.join()
    messages = first["counts"]["messages"]["inserted"]
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, sampler.peak)
    return {
        "input": str(args.path) if args.path else f"generated ({messages} messages)",
        "input_bytes": path.stat().st_size if path.is_file() else None,
        "messages": messages,
        "first_import_s": round(first_s, 2),
        "messages_per_s": round(messages / first_s),
        "reimport_s": round(second_s, 2),
        "reimport_changed": second["changed"],
        "peak_rss_mib": round(peak / 1024**2),
        "canonical_db_mib": round(settings.canonical_path.stat().st_size / 1024**2),
        "meets_target": messages / first_s >= TARGET_MESSAGES_PER_S and peak < TARGET_PEAK_BYTES,
        "load_average_1m_before": load_before,
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    sys.exit(main())
