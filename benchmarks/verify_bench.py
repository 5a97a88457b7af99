"""`verify_citations` over an artifact already published: a drafted answer that cites three
messages by `[document_id]`, and one whose third citation is an id the artifact does not
hold (looked up as a source message id too, as a hidden message's is), each checked with
and without `cited_at_artifact` (the current build, as an answer pack's `artifact_id`
gives it).

Prints p50 / p95 / max milliseconds per draft and the 1-minute load average before and after.

Run: `python -m benchmarks.verify_bench --home DIR` (DIR: a home with a published artifact,
e.g. the serving benchmark's `--folder`).
"""

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.serving_bench import bench_settings, summary
from serving.answers import verify_citations
from serving.engine import SearchEngine


def _drafts(engine: SearchEngine) -> tuple[str, dict[str, str]]:
    """The current build id, and the two drafts, citing messages spread over the artifact."""
    with engine.artifact() as artifact:
        picked = [
            _message_at_or_after(artifact, part * (artifact.row_count - 1) // 4)
            for part in (1, 2, 3)
        ]
        build_id = artifact.build_id
    cited = [f"[{record['document_id']}]" for record in picked]
    unknown = f"[{picked[0]['workspace_id']}:C0NOSUCH0:1.000001]"
    return build_id, {
        "three messages": "Facts " + " ".join(cited),
        "two messages and an unknown id": "Facts " + " ".join([*cited[:2], unknown]),
    }


def _message_at_or_after(artifact: Any, start: int) -> dict[str, object]:
    """The display record of the first message (a row with a source message) from `start`."""
    for row in range(start, artifact.row_count):
        record = artifact.display_row(row)
        if record["source_message_id"] is not None:
            return record
    raise SystemExit(f"the artifact holds no message after row {start}")


def _milliseconds(call: Any, calls: int) -> dict[str, float]:
    """p50 / p95 / max milliseconds of `calls` calls, after five untimed ones."""
    for _ in range(5):
        call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return summary(times)


def run(home: Path, calls: int) -> dict[str, Any]:
    engine = SearchEngine(bench_settings(home))
    report: dict[str, Any] = {"home": str(home), "calls": calls}
    report["load_average_1m_before"] = round(os.getloadavg()[0], 2)
    try:
        build_id, drafts = _drafts(engine)
        for draft, text in drafts.items():
            for cited_at in (None, build_id):
                result = verify_citations(engine, text, cited_at)
                if (result.verdict == "verified") != (draft == "three messages"):
                    raise SystemExit(f"{draft}: {result.verdict}: {result.problems}")
                label = f"{draft}, cited_at={'current' if cited_at else 'none'}"
                report[label] = _milliseconds(
                    lambda text=text, cited_at=cited_at: verify_citations(engine, text, cited_at),
                    calls,
                )
    finally:
        engine.close()
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a home with a published artifact")
    parser.add_argument("--calls", type=int, default=100, help="timed calls per case")
    args = parser.parse_args()
    print(json.dumps(run(args.home, args.calls), indent=2))


if __name__ == "__main__":
    main()
