"""The vector scan (int8 codes, the kernel, shared passes) and the query-embedding step."""

import os
import select
import signal
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import serving.semantic
from serving.ranking import PRESELECT_MIN_VALUES
from serving.semantic import (
    NIBBLE_DEPTH,
    PASS_QUERIES,
    RESCORE_DEPTH,
    Int8Scan,
    QueryEmbedder,
    best_indices,
    dot_scores,
    vector_scores,
    vector_scores_many,
)
from slackquery.artifacts.arrays import NIBBLE_SCALE, Int8Codes, pack_nibbles
from slackquery.embedding.base import GenerationIdentity
from slackquery.errors import SlackqueryError

IDENTITY = GenerationIdentity(
    model="test/hashed-words",
    model_revision="1",
    native_dimension=8,
    query_prefix="",
    document_prefix="",
    text_recipe_version="message-v2",
)


class RecordingEmbedder:
    """Deterministic vectors from the text's bytes; records every batch it is asked for."""

    identity = IDENTITY

    def __init__(self, dimension: int = 8, zero_for: str | None = None):
        self.batches: list[list[str]] = []
        self.dimension = dimension
        self.zero_for = zero_for

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            if text != self.zero_for:
                for index, byte in enumerate(text.encode()):
                    vectors[row, index % self.dimension] += byte
        return vectors


def embedder_for(fake: RecordingEmbedder) -> QueryEmbedder:
    return QueryEmbedder(lambda: fake)  # type: ignore[arg-type, return-value]


def test_uncached_texts_go_to_the_model_in_one_call() -> None:
    fake = RecordingEmbedder()
    queries = embedder_for(fake)
    generation = IDENTITY.generation_id
    first = queries.embed("whole question", generation, 8)
    vectors = queries.embed_many(
        ["whole question", "part one", "part two", "part one"], generation, 8
    )
    assert fake.batches == [["whole question"], ["part one", "part two"]]
    assert vectors.shape == (4, 8)
    np.testing.assert_array_equal(vectors[0], first)
    np.testing.assert_array_equal(vectors[1], vectors[3])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    # Each row is the text's own vector, whatever it was batched with.
    alone = embedder_for(RecordingEmbedder()).embed("part two", generation, 8)
    np.testing.assert_array_equal(vectors[2], alone)
    queries.embed_many(["part two", "whole question"], generation, 8)
    assert len(fake.batches) == 2  # all cached
    queries.forget()
    queries.embed("part two", generation, 8)
    assert fake.batches[-1] == ["part two"]


def test_bad_vectors_and_generations_are_errors() -> None:
    generation = IDENTITY.generation_id
    with pytest.raises(SlackqueryError, match="artifact vectors have 16"):
        embedder_for(RecordingEmbedder()).embed_many(["a", "b"], generation, 16)
    with pytest.raises(SlackqueryError, match="empty or invalid"):
        embedder_for(RecordingEmbedder(zero_for="b")).embed_many(["a", "b"], generation, 8)
    with pytest.raises(SlackqueryError, match="generation mismatch"):
        embedder_for(RecordingEmbedder()).embed("a", "another-generation", 8)


def unit_rows(rng: np.random.Generator, count: int, dimension: int) -> np.ndarray:
    rows = rng.standard_normal((count, dimension)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def clustered(seed: int, count: int = 6000, dimension: int = 96) -> np.ndarray:
    """Unit vectors around a few topics, the shape real embeddings have (ties unlikely)."""
    rng = np.random.default_rng(seed)
    topics = unit_rows(rng, 12, dimension)
    rows = topics[rng.integers(0, 12, count)] + 0.6 * unit_rows(rng, count, dimension)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_int8_codes_estimate_cosines_closely() -> None:
    matrix = clustered(0, count=20_000)  # several quantisation blocks
    codes = Int8Codes.of(matrix)
    np.testing.assert_array_equal(codes.scales, np.abs(matrix).max(axis=0) / 127)
    assert codes.codes.dtype == np.int8 and codes.codes.shape == matrix.shape
    query = unit_rows(np.random.default_rng(1), 1, matrix.shape[1])
    query_codes, factor = codes.quantise_queries(query)
    estimate = (codes.codes.astype(np.int32) @ query_codes[0].astype(np.int32)) * factor[0]
    assert np.abs(estimate - matrix @ query[0]).max() < 0.01


@pytest.mark.parametrize("seed", range(4))
def test_quantised_scan_keeps_the_exact_top_and_its_scores(seed: int) -> None:
    matrix = clustered(seed)
    codes = Int8Codes.of(matrix)
    rng = np.random.default_rng(100 + seed)
    query = matrix[int(rng.integers(0, matrix.shape[0]))] + 0.3 * unit_rows(rng, 1, 96)[0]
    query /= np.linalg.norm(query)
    exact = dot_scores(matrix, query)
    for positions in (None, np.sort(rng.choice(6000, 700, replace=False)), np.arange(0, 6000, 2)):
        wanted = exact if positions is None else exact[positions]
        scores = vector_scores(matrix, query, positions, Int8Scan(codes))
        assert scores.shape == wanted.shape
        top = np.argsort(-wanted, kind="stable")[:100]
        assert set(np.argsort(-scores, kind="stable")[:100]) == set(top)
        # The re-scored best carry exact cosines, the rest estimates close to them.
        np.testing.assert_array_equal(scores[top], wanted[top])
        assert np.abs(scores - wanted).max() < 0.01
        assert np.count_nonzero(scores == wanted) >= RESCORE_DEPTH


def test_quantised_many_equals_one_at_a_time() -> None:
    matrix = clustered(7)
    codes = Int8Scan(Int8Codes.of(matrix))
    queries = matrix[[3, 500, 4000]]
    for positions in (None, np.arange(100, 1900)):
        many = vector_scores_many(matrix, queries, positions, codes)
        for query, scores in zip(queries, many, strict=True):
            np.testing.assert_array_equal(scores, vector_scores(matrix, query, positions, codes))


def test_sets_within_the_rescore_depth_are_scored_exactly() -> None:
    matrix = clustered(3, count=RESCORE_DEPTH + 50)
    codes = Int8Scan(Int8Codes.of(matrix))
    query = matrix[0]
    positions = np.arange(0, RESCORE_DEPTH)
    np.testing.assert_array_equal(
        vector_scores(matrix, query, positions, codes), vector_scores(matrix, query, positions)
    )
    np.testing.assert_array_equal(
        vector_scores_many(matrix, matrix[:2], positions, codes),
        vector_scores_many(matrix, matrix[:2], positions),
    )


def test_the_quantised_scan_leaves_nones_reference_count_alone() -> None:
    # simsimd's `out=` path returned None without a reference: each block scanned took one,
    # and a long-running server aborted with "deallocating None" (Python 3.11).
    matrix = clustered(3, count=20_000)
    codes = Int8Scan(Int8Codes.of(matrix))
    query = matrix[0]
    vector_scores(matrix, query, None, codes)  # warm-up: first-call caches
    before = sys.getrefcount(None)
    for _ in range(50):
        vector_scores(matrix, query, None, codes)
    assert abs(sys.getrefcount(None) - before) < 10


def int8_scans(count: int = 3000, dimension: int = 128) -> tuple[Int8Scan, Int8Scan]:
    """The same codes behind the kernel (where built and supported) and behind simsimd."""
    codes = Int8Codes.of(clustered(5, count=count, dimension=dimension))
    kernel, fallback = Int8Scan(codes), Int8Scan(codes)
    fallback.uses_kernel = False
    return kernel, fallback


def integer_products(codes: np.ndarray, query_codes: np.ndarray) -> np.ndarray:
    return (query_codes.astype(np.int64) @ codes.astype(np.int64).T).astype(np.float32)


def full_pass(scan: Int8Scan, query_codes: np.ndarray) -> np.ndarray:
    """What `dot_products` gives for every row: simsimd's int8 integers; the kernel's int4
    products in int8 units, each query's best `NIBBLE_DEPTH` replaced by the int8 integers."""
    exact = integer_products(scan.codes.codes, query_codes)
    if not scan.uses_kernel:
        return exact
    int4 = np.rint(scan.codes.codes * np.float32(7 / 127))
    estimates = integer_products(int4, query_codes) * np.float32(NIBBLE_SCALE)
    for estimate, wanted in zip(estimates, exact, strict=True):
        best = best_indices(estimate, NIBBLE_DEPTH)
        best = np.arange(estimate.size) if best is None else best
        estimate[best] = wanted[best]
    return estimates


needs_kernel = pytest.mark.skipif(
    not int8_scans(10)[0].uses_kernel,
    reason="serving/_int8dot.c not built, or neither AVX-512 VNNI nor AVX2",
)


@needs_kernel
@pytest.mark.parametrize("queries", [1, 2, 3, PASS_QUERIES, PASS_QUERIES + 3])
def test_kernel_products_are_the_exact_integers_and_equal_simsimd(queries: int) -> None:
    kernel, fallback = int8_scans()
    codes = kernel.codes.codes
    # Query bytes within -127..127, as `Int8Codes.quantise_queries` makes them (AVX2 needs it).
    query_codes = np.random.default_rng(queries).integers(-127, 128, (queries, 128), np.int8)
    for positions in (None, np.array([2999, 0, 17, 17, 1500]), np.arange(0, 3000, 3)):
        wanted = integer_products(codes if positions is None else codes[positions], query_codes)
        for threads in (1, 2):
            products = serving.semantic._kernel_products(codes, query_codes, positions, threads)
            np.testing.assert_array_equal(products, wanted)
        np.testing.assert_array_equal(fallback.dot_products(query_codes, positions), wanted)


@needs_kernel
@pytest.mark.parametrize("queries", [1, 3, PASS_QUERIES + 3])
def test_a_kernel_pass_reads_nibbles_and_refines_each_querys_best(queries: int) -> None:
    kernel = int8_scans()[0]
    query_codes = np.random.default_rng(queries).integers(-127, 128, (queries, 128), np.int8)
    wanted = full_pass(kernel, query_codes)
    np.testing.assert_array_equal(kernel.dot_products(query_codes, None), wanted)
    # Outside each query's refined best: int4 estimates, not the int8 integers.
    assert not np.array_equal(wanted, integer_products(kernel.codes.codes, query_codes))
    # A subset large enough to share the pass is refined within itself.
    positions = np.arange(0, 3000, 2)
    subset = kernel.dot_products(query_codes, positions)
    exact = integer_products(kernel.codes.codes[positions], query_codes)
    np.testing.assert_array_equal(subset, exact)  # 1,500 positions: all within the depth


@needs_kernel
def test_the_nibble_pass_keeps_the_exact_top_and_its_scores() -> None:
    matrix = clustered(11, count=8 * NIBBLE_DEPTH, dimension=128)
    scan = Int8Scan(Int8Codes.of(matrix))
    assert scan.uses_kernel
    rng = np.random.default_rng(12)
    for _ in range(5):
        query = matrix[int(rng.integers(0, len(matrix)))] + 0.3 * unit_rows(rng, 1, 128)[0]
        query /= np.linalg.norm(query)
        exact = dot_scores(matrix, query)
        scores = vector_scores(matrix, query, None, scan)
        top = np.argsort(-exact, kind="stable")[:100]
        assert set(np.argsort(-scores, kind="stable")[:100]) == set(top)
        np.testing.assert_array_equal(scores[top], exact[top])
        assert np.abs(scores - exact).max() < 0.1  # coarse int4 estimates outside the best


@needs_kernel
def test_nibble_products_are_the_int4_integers_in_int8_units() -> None:
    codes = np.random.default_rng(3).integers(-127, 128, (300, 192), np.int8)
    codes[0], codes[1] = 127, -127  # every nibble 15, every nibble 1: the largest products
    query_codes = np.random.default_rng(4).integers(-128, 128, (PASS_QUERIES + 1, 192), np.int8)
    query_codes[0], query_codes[1] = 127, -128
    int4 = np.rint(codes * np.float32(7 / 127))
    wanted = integer_products(int4, query_codes) * np.float32(NIBBLE_SCALE)
    for threads in (1, 2):
        products = serving.semantic._nibble_products(pack_nibbles(codes), query_codes, threads)
        np.testing.assert_array_equal(products, wanted)


@needs_kernel
def test_the_kernel_refuses_rows_outside_its_arrays() -> None:
    codes = np.zeros((10, 64), dtype=np.int8)
    query = np.zeros((1, 64), dtype=np.int8)
    out = np.zeros((1, 4), dtype=np.float32)
    kernel = serving.semantic._int8dot
    assert kernel is not None
    kernel.dot_rows(codes, query, out, 64, 0, 4, np.array([9, 0, 1, 2]))
    for start, stop, rows in (
        (0, 4, np.array([10, 0, 1, 2])),
        (0, 5, None),
        (0, 2, np.array([-1, 0])),
    ):
        with pytest.raises(ValueError, match="outside"):
            kernel.dot_rows(codes, query, out, 64, start, stop, rows)
    with pytest.raises(ValueError, match="multiple of 64"):
        kernel.dot_rows(codes, query, out, 32, 0, 4, None)


@needs_kernel
def test_the_nibble_kernel_refuses_what_does_not_fit() -> None:
    kernel = serving.semantic._int8dot
    assert kernel is not None
    nibbles = np.full((10, 32), 0x88, dtype=np.uint8)  # ten rows of 64 zero codes
    query = np.ones((1, 64), dtype=np.int8)
    out = np.ones((1, 10), dtype=np.float32)
    kernel.dot_nibbles(nibbles, query, out, 64, 0, 10, 1.0)
    np.testing.assert_array_equal(out, 0)
    with pytest.raises(ValueError, match="outside"):
        kernel.dot_nibbles(nibbles, query, np.zeros((1, 11), np.float32), 64, 0, 11, 1.0)
    with pytest.raises(ValueError, match="multiple of 64"):
        kernel.dot_nibbles(nibbles, query[:, :32], out, 32, 0, 10, 1.0)
    with pytest.raises(ValueError, match="dim / 2 bytes per row"):
        kernel.dot_nibbles(nibbles.reshape(-1)[:-1], query, out, 64, 0, 10, 1.0)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        kernel.dot_nibbles(nibbles, np.ones((9, 64), np.int8), out, 64, 0, 10, 1.0)


@needs_kernel
def test_the_kernel_is_exact_at_the_extremes_of_int8() -> None:
    """Row bytes -128 and 127 against query bytes +-127: the largest products and, on AVX2,
    the largest 16-bit pair sums (which must not saturate)."""
    kernel = serving.semantic._int8dot
    assert kernel is not None
    codes = np.array([[-128] * 64, [127] * 64, [-128, 127] * 32], dtype=np.int8)
    queries = np.array([[-127] * 64, [127] * 64, [127, -127] * 32], dtype=np.int8)
    out = np.zeros((3, 3), dtype=np.float32)
    kernel.dot_rows(codes, queries, out, 64, 0, 3, None)
    np.testing.assert_array_equal(out, integer_products(codes, queries))
    if kernel.instruction_set() == "avx2":  # -128 in a query would saturate a pair sum
        with pytest.raises(ValueError, match=r"within -127\.\.127"):
            kernel.dot_rows(codes, np.full((1, 64), -128, np.int8), out[:1], 64, 0, 3, None)


class SignallingQueue(deque):
    """A pass queue that tells the test each time a search joins it."""

    def __init__(self) -> None:
        super().__init__()
        self.joined = threading.Semaphore(0)

    def append(self, item: object) -> None:
        super().append(item)
        self.joined.release()


@pytest.mark.parametrize("with_kernel", [True, False])
def test_searches_waiting_for_a_pass_share_the_next(
    monkeypatch: pytest.MonkeyPatch, with_kernel: bool
) -> None:
    kernel, fallback = int8_scans()
    scan = kernel if with_kernel else fallback
    if with_kernel and not scan.uses_kernel:
        pytest.skip("serving/_int8dot.c not built or no AVX-512 VNNI")
    scan._waiting = SignallingQueue()
    passes: list[int] = []  # query rows of each pass over every row
    first_started, release = threading.Event(), threading.Event()
    name = "_nibble_products" if with_kernel else "_scan"
    products = getattr(serving.semantic, name)

    def recorded_products(*args: Any) -> object:
        # _nibble_products(nibbles, query_codes, threads), _scan(codes, positions, width, ...)
        passes.append(len(args[1]) if with_kernel else args[2])
        if len(passes) == 1:
            first_started.set()
            assert release.wait(timeout=60)
        return products(*args)

    monkeypatch.setattr(serving.semantic, name, recorded_products)
    query_codes = np.random.default_rng(0).integers(-127, 128, (5, 128), np.int8)
    # One search of two parts (a multi-part question) and three of one.
    asks = [query_codes[0:1], query_codes[1:3], query_codes[3:4], query_codes[4:5]]
    results: dict[int, np.ndarray] = {}

    def search(index: int) -> None:
        results[index] = scan.dot_products(asks[index], None)

    threads = [threading.Thread(target=search, args=(index,)) for index in range(len(asks))]
    threads[0].start()
    assert first_started.wait(timeout=60)
    for thread in threads[1:]:
        thread.start()
    for _ in asks:
        assert scan._waiting.joined.acquire(timeout=60)
    release.set()
    for thread in threads:
        thread.join(timeout=60)
    # The first pass ran alone; the three searches that queued behind it shared one more.
    assert passes == [1, 4]
    for index, ask in enumerate(asks):
        np.testing.assert_array_equal(results[index], full_pass(scan, ask))
    assert not scan._waiting and not scan._passing


def test_a_failed_pass_fails_its_searches_and_the_next_pass_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scan = int8_scans()[1]
    query_codes = np.ones((1, 128), dtype=np.int8)
    real_scan = serving.semantic._scan
    monkeypatch.setattr(serving.semantic, "_scan", lambda *args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        scan.dot_products(query_codes, None)
    monkeypatch.setattr(serving.semantic, "_scan", real_scan)
    np.testing.assert_array_equal(
        scan.dot_products(query_codes, None), integer_products(scan.codes.codes, query_codes)
    )


@pytest.mark.parametrize("count", [1, RESCORE_DEPTH, 5000])
def test_best_indices_of_many_scores_are_the_highest(count: int) -> None:
    # Past PRESELECT_MIN_VALUES the partition runs over a sampled threshold's survivors.
    scores = np.random.default_rng(count).standard_normal(3 * PRESELECT_MIN_VALUES)
    best = best_indices(scores.astype(np.float32), count)
    assert best is not None and best.size == count and np.all(np.diff(best) > 0)
    expected = np.sort(np.argsort(-scores.astype(np.float32), kind="stable")[:count])
    assert best.tolist() == expected.tolist()


def test_a_search_alone_scans_on_every_core_and_beside_others_on_one() -> None:
    searches = serving.semantic.SearchesInFlight()
    assert searches.scan_threads() == serving.semantic.SCAN_THREADS
    with searches.search():
        assert searches.scan_threads() == serving.semantic.SCAN_THREADS
        with searches.search():
            assert searches.scan_threads() == 1
        assert searches.scan_threads() == serving.semantic.SCAN_THREADS


@needs_kernel
def test_a_forked_child_scans_on_threads_of_its_own() -> None:
    kernel = int8_scans()[0]
    query_codes = np.ones((1, 128), dtype=np.int8)
    wanted = full_pass(kernel, query_codes)
    with serving.semantic.SEARCHES.search():  # alone: the pass runs on the pool
        np.testing.assert_array_equal(kernel.dot_products(query_codes, None), wanted)
    if serving.semantic.SCAN_THREADS < 2:
        pytest.skip("one core: passes never use the pool")
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        status = 1
        try:
            with serving.semantic.SEARCHES.search():
                same = np.array_equal(kernel.dot_products(query_codes, None), wanted)
            status = 0 if same else 2
        finally:
            os.write(writer, bytes([status]))
            os._exit(0)
    os.close(writer)
    try:
        # A child waiting on threads it does not have would never answer: give it a minute.
        ready, _, _ = select.select([reader], [], [], 60)
        if not ready:
            os.kill(child, signal.SIGKILL)
        assert ready and os.read(reader, 1) == b"\x00"
    finally:
        os.close(reader)
        os.waitpid(child, 0)
