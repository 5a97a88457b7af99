"""Benchmark: build + validate + publish of one artifact from a synthetic state database.

    python -m benchmarks.artifact_bench --messages 100000 [--dimension 768] [--json]

Synthesises N messages (threads, tombstones, thread contexts) with unit vectors already
"embedded", then times `build_artifact` (copy, dbt FTS macro, arrays, GX checkpoint in a
process of its own, checksum, manifest) and `publish`, phase by phase, and reports the peak resident
memory of the builder (measured from after synthesis) and of the validation process,
the artifact bytes per message and the load average. Target at 1,000,000 messages:
<= 120 s and < 6 GiB peak.
"""

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slackquery.artifacts import arrays, build, files, fts, inputs, validate
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import publish
from slackquery.embedding import configured_identity
from slackquery.settings import get_settings
from tests.artifacts.synthetic import synthesize_state

# (module, attribute, phase name): the steps of build_artifact and publish, timed in place.
PHASES = (
    (inputs, "check_coverage", "coverage_check"),
    (build, "write_candidate", "copy_documents_and_vector_sketches"),
    (fts, "build_index", "fts_index_dbt"),
    (build, "seal_candidate", "metadata_and_checkpoint"),
    (arrays, "write_arrays", "arrays_with_vectors_from_state"),
    (validate, "run_checkpoint", "gx_validation_process"),
    (build, "finalize", "rename_chmod_sha256"),
    (arrays, "describe", "arrays_sha256"),
    (validate, "verify_sealed", "publish_seal_check_sha256"),
)


def _vm_hwm_mib() -> float | None:
    """Peak resident memory of this process since exec or the last reset (Linux)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 0)
    return None


def _reset_peak() -> None:
    """Restart the VmHWM count at the current RSS, so synthesis is not counted."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
        f.write("5")


@contextlib.contextmanager
def _timed_phases(timings: dict[str, float]) -> Iterator[None]:
    """Wrap each phase function so its wall time accumulates in `timings`."""
    originals = [(module, name, getattr(module, name)) for module, name, _ in PHASES]

    def timed(function: Callable[..., Any], phase: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timings[phase] = round(timings.get(phase, 0.0) + time.perf_counter() - started, 2)

        return wrapper

    for (module, name, phase), (_, _, original) in zip(PHASES, originals, strict=True):
        setattr(module, name, timed(original, phase))
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


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
    rss_after_synthesis = _vm_hwm_mib()
    _reset_peak()

    timings: dict[str, float] = {}
    load_before = os.getloadavg()
    with _timed_phases(timings):
        started = time.perf_counter()
        build_id = build_artifact(settings)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        publish(settings, build_id)
        publish_s = time.perf_counter() - started
    load_after = os.getloadavg()

    artifact = files.artifact_file(settings.artifact_path, build_id)
    validation = files.read_json(files.validation_file(settings.artifact_path, build_id))
    size = artifact.stat().st_size
    return {
        "messages": messages,
        "dimension": dimension,
        "documents": counts,
        "synthesis_s": round(synth_s, 1),
        "phases_s": timings,
        "build_s_including_validation": round(build_s, 1),
        "publish_s": round(publish_s, 2),
        "build_validate_publish_s": round(build_s + publish_s, 1),
        "peak_rss_mib_builder": _vm_hwm_mib(),
        "peak_rss_mib_synthesis": rss_after_synthesis,
        "peak_rss_mib_validation_process": validation.get("peak_rss_mib"),
        "artifact_bytes": size,
        "artifact_bytes_per_message": round(size / counts["active_messages"], 0),
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in load_after],
    }


def main() -> int:
    """Parse arguments, run once in a temporary home, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--dimension", type=int, default=768, help="vector width (default: the default model's)"
    )
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
