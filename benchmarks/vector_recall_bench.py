"""Recall@K of the quantised vector scan against the exact float32 scan, on a published artifact.

For each query vector, the exact ranking is the float32 product over every searchable
vector; the quantised one is `serving.semantic.vector_scores` with the artifact's int8
codes (the scan the engine runs: int8 estimates, the best `RESCORE_DEPTH` re-scored
exactly; where the C kernel runs, a full pass reads int4 nibbles and only each query's
best `NIBBLE_DEPTH` get int8 estimates). Both are cut with the engine's own
`top_candidates` (ties by row). Query vectors: `random` (seeded random unit vectors, the
serving benchmark's query condition; on seeded random document vectors the hardest case,
since cosines bunch near 0), `documents` (stored document vectors used as queries: the
distribution real questions come from) and, with `--questions`, the questions of a Beacon
YAML embedded by the configured model.
Prints the mean and minimum recall, the share of queries with every hit kept, and the
median scan times, with the 1-minute load average.

Run: `python -m benchmarks.vector_recall_bench --home DIR [--questions queries-dev.yaml]`
(DIR: a SLACKQUERY_HOME with a published artifact, e.g. a serving-bench folder or
SLACKQUERY_HOME/eval/beacon-corpus after `slackquery eval --corpus`).
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from serving.artifact import LoadedArtifact
from serving.ranking import top_candidates
from serving.semantic import (
    NIBBLE_DEPTH,
    RESCORE_DEPTH,
    dot_scores,
    kernel_instructions,
    kernel_runs,
    vector_scores,
)
from slackquery.artifacts.publish import current_artifact
from slackquery.embedding import build_embedder
from slackquery.settings import Settings


def recall(artifact: LoadedArtifact, queries: np.ndarray, k: int) -> dict[str, Any]:
    """Recall@k of the quantised scan per query vector, and both scans' median times."""
    positions = artifact.searchable_vectors
    rows = artifact.vector_rows if positions is None else artifact.vector_rows[positions]
    recalls, exact_ms, quantised_ms = [], [], []
    for query in queries:
        started = time.perf_counter()
        exact = dot_scores(artifact.vectors, query)
        exact = exact if positions is None else exact[positions]
        middle = time.perf_counter()
        quantised = vector_scores(artifact.vectors, query, positions, artifact.vector_scan)
        done = time.perf_counter()
        wanted = set(top_candidates(rows, exact, k).rows.tolist())
        got = set(top_candidates(rows, quantised, k).rows.tolist())
        recalls.append(len(wanted & got) / len(wanted))
        exact_ms.append((middle - started) * 1000)
        quantised_ms.append((done - middle) * 1000)
    return {
        "queries": len(recalls),
        f"mean_recall_at_{k}": round(statistics.fmean(recalls), 5),
        f"min_recall_at_{k}": round(min(recalls), 3),
        "share_with_every_hit": round(sum(r == 1.0 for r in recalls) / len(recalls), 3),
        "exact_scan_ms_p50": round(statistics.median(exact_ms), 2),
        "quantised_scan_ms_p50": round(statistics.median(quantised_ms), 2),
    }


def question_vectors(settings: Settings, path: Path, artifact: LoadedArtifact) -> np.ndarray:
    """The Beacon YAML's questions embedded as queries by the configured model."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    entries = document["queries"] if isinstance(document, dict) else document
    texts = [str(entry["query"]) for entry in entries]
    vectors = np.asarray(build_embedder(settings).embed_queries(texts), dtype=np.float32)
    vectors = vectors.reshape(len(texts), artifact.dimension)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def run(home: Path, count: int, k: int, questions: Path | None) -> dict[str, Any]:
    """Recall per query set on the artifact published in `home`."""
    settings = Settings(
        home=home, canonical_db=None, state_db=None, artifact_dir=None, log_dir=None
    )
    path = current_artifact(settings)
    if path is None:
        raise SystemExit(f"no published artifact under {home}")
    artifact = LoadedArtifact(path)
    rng = np.random.default_rng(5)
    random = rng.standard_normal((count, artifact.dimension)).astype(np.float32)
    random /= np.linalg.norm(random, axis=1, keepdims=True)
    sampled = rng.choice(artifact.vectors.shape[0], min(count, artifact.vectors.shape[0]), False)
    report: dict[str, Any] = {
        "artifact": str(path),
        "vectors": list(artifact.vectors.shape),
        "rescore_depth": RESCORE_DEPTH,
        # Full passes read int4 nibbles where the kernel runs; their best go on to int8.
        "scan": kernel_instructions(artifact.dimension),
        "nibble_depth": NIBBLE_DEPTH if kernel_runs(artifact.dimension) else None,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
        "random": recall(artifact, random, k),
        "documents": recall(artifact, artifact.vectors[np.sort(sampled)], k),
    }
    if questions is not None:
        report["questions"] = recall(artifact, question_vectors(settings, questions, artifact), k)
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    artifact.close()
    return report


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", type=Path, required=True, help="SLACKQUERY_HOME to read")
    parser.add_argument("--queries", type=int, default=200, help="random and document queries")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--questions", type=Path, help="Beacon queries YAML to embed")
    args = parser.parse_args()
    report = run(args.home, args.queries, args.k, args.questions)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
