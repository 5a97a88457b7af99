"""Benchmark: build + validate + publish of one artifact from a synthetic state database.

    python -m benchmarks.artifact_bench --messages 100000 [--dimension 384] [--json]

Synthesises N messages (threads, tombstones, thread contexts) with unit vectors already
"embedded", then times `build_artifact` (copy, dbt FTS macro, GX checkpoint in a fresh
process, checksum, manifest) and `publish`, and reports peak RSS of this process and of
the validation child, plus artifact bytes per message. Target at 1,000,000 messages:
<= 120 s and < 6 GiB peak.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from slackquery.artifacts import files
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import publish
from slackquery.embedding import configured_identity
from slackquery.settings import get_settings
from tests.artifacts.synthetic import synthesize_state


def _peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def run(messages: int, dimension: int, home: Path) -> dict[str, Any]:
    """Synthesise, build, publish; return the figures."""
    os.environ.update(
        {
            "SLACKQUERY_HOME": str(home),
            "SLACKQUERY_EMBEDDING_MODEL": "bench/hash",
            "SLACKQUERY_EMBEDDING_TRANSPORT": "openai",
            "SLACKQUERY_EMBEDDING_DIMENSION": str(dimension),
            "SLACKQUERY_EMBEDDING_MODEL_REVISION": "r1",
        }
    )
    settings = get_settings()
    identity = configured_identity(settings)
    assert identity is not None
    started = time.perf_counter()
    counts = synthesize_state(settings.state_path, identity, messages=messages)
    synth_s = time.perf_counter() - started
    rss_before = _peak_mib(resource.RUSAGE_SELF)

    started = time.perf_counter()
    build_id = build_artifact(settings)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    publish(settings, build_id)
    publish_s = time.perf_counter() - started

    artifact = files.artifact_file(settings.artifact_path, build_id)
    validation = files.read_json(files.validation_file(settings.artifact_path, build_id))
    validate_s = (
        _seconds(validation["completed_at"]) - _seconds(validation["started_at"])
        if validation.get("completed_at")
        else None
    )
    size = artifact.stat().st_size
    return {
        "messages": messages,
        "dimension": dimension,
        "documents": counts,
        "synthesis_s": round(synth_s, 1),
        "build_s_including_validation": round(build_s, 1),
        "validation_s_inside_build": round(validate_s, 1) if validate_s else None,
        "publish_s": round(publish_s, 2),
        "build_validate_publish_s": round(build_s + publish_s, 1),
        "peak_rss_mib_builder": round(_peak_mib(resource.RUSAGE_SELF), 0),
        "peak_rss_mib_before_build": round(rss_before, 0),
        "peak_rss_mib_validation_child": round(_peak_mib(resource.RUSAGE_CHILDREN), 0),
        "artifact_bytes": size,
        "artifact_bytes_per_message": round(size / counts["active_messages"], 0),
        "cpu_count": os.cpu_count(),
    }


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def main() -> int:
    """Parse arguments, run once in a temporary home, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--home", type=Path, help="keep files here instead of a temp folder")
    args = parser.parse_args()
    if args.home:
        figures = run(args.messages, args.dimension, args.home)
    else:
        with tempfile.TemporaryDirectory(prefix="artifact-bench-") as home:
            figures = run(args.messages, args.dimension, Path(home))
    json.dump(figures, sys.stdout, indent=None if args.json else 2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
