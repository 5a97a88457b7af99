"""BM25 arm cost: scoring every match against stopping early, on a serving-bench artifact.

For the serving benchmark's queries (benchmarks/serving_bench.py: Zipf keywords,
identifiers, questions, Slack syntax), the lexical arm's ranking is computed three ways on
the same mapped index: `matches` (every matching row scored) then the window's best;
`candidates` on NumPy's impact-ordered prefixes; and `candidates` by the C walk
(serving/_bm25.c, where built), which the engine runs. All must give the same window,
which is checked for every query. Each query is timed
`--repeat` times and its minimum kept: on a shared host the minimum is the query's own
cost, the rest is waiting for a core. Prints p50/p95/max per way and the load average.

With `--tantivy`, the same queries also run on a dedicated engine side by side: tantivy
(`pip install tantivy`; not a dependency of this project) indexes every message's FTS
tokens (`fts_tokens` of `text_lexical`, so both engines see the same terms) in a
temporary folder, and each query is its terms as one boolean OR, the window's best asked
for. Its BM25 differs in detail (idf formula, length norms quantised to a byte), so the
comparison is of cost, not of rankings.

Run: `python -m benchmarks.lexical_bench --folder DIR [--tantivy]` (DIR: a
`serving_bench --folder`).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import serving.lexical
from benchmarks.serving_bench import bench_settings, queries, read_corpus, summary
from serving.lexical import BM25Index
from serving.query import fts_tokens, parse_query
from serving.ranking import top_candidates
from slackquery.artifacts import arrays, files
from slackquery.artifacts.publish import current_artifact
from slackquery.duckdb_setup import open_database


def tantivy_search(artifact: Path, is_message: np.ndarray) -> Callable[[list[str], int], object]:
    """A search function over a tantivy index of the artifact's messages (their FTS tokens)."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False)
    schema = builder.build()
    index = tantivy.Index(schema, path=tempfile.mkdtemp(prefix="slackquery-tantivy-"))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    connection = open_database(str(artifact), read_only=True)
    try:
        texts = connection.execute(
            "select text_lexical from search_documents order by document_id"
        ).fetchall()
    finally:
        connection.close()
    for (text,), message in zip(texts, is_message.tolist(), strict=True):
        if message:
            writer.add_document(tantivy.Document(body=" ".join(fts_tokens(text or ""))))
    writer.commit()
    index.reload()
    searcher = index.searcher()

    def search(terms: list[str], window: int) -> object:
        should = [
            (tantivy.Occur.Should, tantivy.Query.term_query(schema, "body", term)) for term in terms
        ]
        return searcher.search(tantivy.Query.boolean_query(should), window)

    return search


def prefixes_only(
    index: BM25Index, terms: list[str], window: int, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`candidates` on NumPy's impact-ordered prefixes, the C walk set aside."""
    walk, serving.lexical._bm25 = serving.lexical._bm25, None
    try:
        return index.candidates(terms, window, eligible)
    finally:
        serving.lexical._bm25 = walk


def run(
    folder: Path, query_count: int, window: int, repeat: int, with_tantivy: bool = False
) -> dict[str, Any]:
    """Time both ways (and tantivy) over the benchmark's queries on the artifact published
    in `folder`."""
    path = current_artifact(bench_settings(folder))
    if path is None:
        raise SystemExit(f"no published artifact under {folder}")
    started = time.perf_counter()
    mapped = arrays.open_arrays(files.arrays_dir_of(path))
    is_message = mapped.documents.arrays["is_message"]
    index = BM25Index(mapped.postings, is_message.size)
    load_s = time.perf_counter() - started
    dedicated = tantivy_search(path, is_message) if with_tantivy else None
    load_before = round(os.getloadavg()[0], 2)
    ways: dict[str, Callable[[list[str]], tuple[np.ndarray, np.ndarray]]] = {
        "score_every_match": lambda terms: index.matches(terms),
        "numpy_prefixes": lambda terms: prefixes_only(index, terms, window, is_message),
    }
    if serving.lexical._bm25 is not None:
        ways["compiled"] = lambda terms: index.candidates(terms, window, is_message)
    minimums: dict[str, list[float]] = {name: [] for name in ways}
    engine, read = [], []
    for text in queries(read_corpus(path), query_count):
        parsed = parse_query(text)
        terms = index.query_terms(parsed.text, 32, parsed.phrases).known
        if not terms:
            continue
        times: dict[str, list[float]] = {name: [] for name in [*ways, "tantivy"]}
        rankings, returned = {}, {}
        for _ in range(repeat):
            if dedicated is not None:
                tick = time.perf_counter()
                dedicated(terms, window)
                times["tantivy"].append(time.perf_counter() - tick)
            for name, way in ways.items():
                tick = time.perf_counter()
                rows, scores = way(terms)
                returned[name] = rows.size
                keep = is_message[rows]
                rankings[name] = top_candidates(rows[keep], scores[keep], window)
                times[name].append(time.perf_counter() - tick)
        for name, ranking in rankings.items():
            if ranking.rows.tolist() != rankings["score_every_match"].rows.tolist():
                raise AssertionError(f"{name} changed the ranking of {text!r}")
            minimums[name].append(min(times[name]) * 1000)
        # The engine's way (the last) against every matching row.
        read.append(returned[[*ways][-1]] / max(1, returned["score_every_match"]))
        if times["tantivy"]:
            engine.append(min(times["tantivy"]) * 1000)
    report = {
        "artifact": str(path),
        "rows": int(is_message.size),
        "postings": int(index.posting_rows.size),
        "index_load_s": round(load_s, 2),
        "queries": len(read),
        "window": window,
        "timing": f"minimum of {repeat} runs per query",
        **{f"{name}_ms": summary(values) for name, values in minimums.items()},
        "median_share_of_matches_returned": round(statistics.median(read), 3),
        "load_average_1m": [load_before, round(os.getloadavg()[0], 2)],
    }
    if engine:
        report["tantivy_ms"] = summary(engine)
    return report


def main() -> None:
    """CLI entry point: print the report as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--tantivy", action="store_true", help="also time tantivy (pip install tantivy)"
    )
    args = parser.parse_args()
    report = run(args.folder, args.queries, args.window, args.repeat, args.tantivy)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
