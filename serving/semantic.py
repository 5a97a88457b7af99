"""Cosine ranking over the artifact's vectors, and the query-embedding step.

Document vectors are stored L2-normalised, so cosine is a dot product. The scan reads the
artifact's int8 codes of the matrix (`slackquery.artifacts.arrays.Int8Codes`: one scale
per dimension; a quarter of float32's bytes) with SIMD int8 dot products, then re-scores
the best `RESCORE_DEPTH` of each query with the float32 vectors, so the top of every
ranking carries exact cosines (measured recall@100 against the exact scan:
benchmarks/vector_recall_bench.py). Without codes, or for sets no larger than the re-score
depth, every score is exact. Query vectors only compare with document vectors of the same
embedding generation, so the embedder's identity is checked against the artifact's before
any query is embedded.

The int8 products come from serving/_int8dot.c where it was built and the CPU has AVX-512
VNNI or AVX2: it reads each row once for up to `PASS_QUERIES` queries, so concurrent
searches that need a pass over every row share one (`Int8Scan`). There a pass over every
row reads the codes' int4 nibbles instead, half the bytes (a pass is bound by memory
bandwidth: 984,175 x 768 on one thread, 28 ms against 49 for one query, 41 against 66 for
four), and the best `NIBBLE_DEPTH` of each query get their int8 products before the
re-score. Elsewhere simsimd computes the int8 integers pair by pair.
"""

import functools
import itertools
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import simsimd

from serving.ranking import preselect
from slackquery.artifacts.arrays import NIBBLE_SCALE, Int8Codes
from slackquery.cores import usable_cores
from slackquery.embedding.base import Embedder, ensure_same_generation
from slackquery.errors import SlackqueryError

# Below this share of eligible vectors, scoring only those rows beats the full product
# (measured at 1M x 768: a 12.6% subset 61-77 ms, the full pass 100 ms; even at 20%).
_SUBSET_SHARE = 0.18
# Rows gathered per step of a subset product: 1,024 x 768 float32 is 3 MiB, one buffer reused
# for the whole subset. Copying the whole subset at once allocates hundreds of MiB of fresh
# memory per query (numpy asks for huge pages for it): in a long-running engine at 1M,
# filtered searches measured 200-650 ms that way, against ~50 ms for the same copy in
# isolation and ~60 ms in blocks. Int8 rows are a quarter the size: 4x the rows per block.
_GATHER_BYTES = 3 * 1024 * 1024
# Threads of an int8 pass for a search alone (`SearchesInFlight`): one pass gets faster on
# every core (simsimd at 1M x 768 on 2 cores: 45 ms on one thread, 24 ms on two; the kernel
# 27 and 23). Both release the GIL meanwhile.
SCAN_THREADS = usable_cores()
# Positions per query whose int8 estimate is replaced by the exact float32 cosine: every
# ranking the engine cuts (candidate windows of ~100) lies well inside it.
RESCORE_DEPTH = 400
# Positions per query whose nibble (int4) estimate from a full kernel pass is replaced by
# the int8 product before the re-score: int4 estimates are off by ~8e-3 of a cosine, and the
# exact top 100 of 984,175 seeded random vectors lay within the int4 top 1,000 for 30 of 30
# random queries (recall 0.99-1.0) and within the top 2,000 for all (recall 1.0).
NIBBLE_DEPTH = 2000
# Queries one kernel pass scores (its registers hold one accumulator per query). At
# 984,175 x 768 on 2 threads a pass took 23 ms for one query, 26 for four, 33 for eight.
PASS_QUERIES = 8
# Row ranges per kernel pass: more ranges than threads, so a thread slowed by other work
# does not hold the pass up.
_RANGES_PER_THREAD = 4

try:
    from serving import _int8dot  # built by setup.py where a C compiler is present
except ImportError:
    _int8dot = None


def kernel_runs(dimension: int) -> bool:
    """Whether int8 scans of `dimension`-d codes run on serving/_int8dot.c here (built, the
    CPU has AVX-512 VNNI or AVX2, whole 64-byte slices) rather than on simsimd."""
    return _int8dot is not None and _int8dot.supported() and dimension % 64 == 0


def kernel_instructions(dimension: int) -> str:
    """What computes int8 scans of `dimension`-d codes here, for reports."""
    if not kernel_runs(dimension):
        return "simsimd (serving/_int8dot.c not built, or neither AVX-512 VNNI nor AVX2)"
    assert _int8dot is not None
    return f"serving/_int8dot.c, {_int8dot.instruction_set()}"


def dot_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """`matrix @ query` as float32 (cosine, since both sides are L2-normalised)."""
    # einsum runs single-threaded SIMD: on a busy 2-core host, BLAS's thread pool
    # oversubscribes and makes one matrix-vector product slower (measured: 2-thread sgemv
    # p95 16 ms vs einsum 14 ms at 100k x 384; 1-thread sgemv ties einsum but needs a
    # process-wide BLAS setting).
    return np.einsum("ij,j->i", matrix, query)


def vector_scores(
    matrix: np.ndarray,
    query: np.ndarray,
    positions: np.ndarray | None,
    scan: "Int8Scan | None" = None,
) -> np.ndarray:
    """Cosine of `query` with the matrix rows at `positions` (None: every row), in order.

    With the matrix's int8 `scan`, only the best `RESCORE_DEPTH` scores are exact; the
    others are int8 estimates of the cosine (off by about 1e-3), or past the best
    `NIBBLE_DEPTH` of a kernel pass over every row, int4 ones (about 8e-3).
    """
    if scan is not None and _count(matrix, positions) > RESCORE_DEPTH:
        return _quantised_scores(matrix, scan, query[None, :], positions)[0]
    if positions is None:
        return dot_scores(matrix, query)
    if positions.size == 0:
        return np.zeros(0, dtype=np.float32)
    if positions.size >= _SUBSET_SHARE * matrix.shape[0]:
        return dot_scores(matrix, query)[positions]
    scores = np.empty(positions.size, dtype=np.float32)
    for start, rows in _row_blocks(matrix, positions):
        scores[start : start + len(rows)] = dot_scores(rows, query)
    return scores


def _count(matrix: np.ndarray, positions: np.ndarray | None) -> int:
    return matrix.shape[0] if positions is None else positions.size


def _row_blocks(matrix: np.ndarray, positions: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """`(offset, rows)` blocks of at most `_GATHER_BYTES`: the rows at `positions` gathered
    into one reused buffer."""
    block_rows = max(1, _GATHER_BYTES // max(1, matrix.shape[1] * matrix.itemsize))
    block = np.empty((min(block_rows, positions.size), matrix.shape[1]), dtype=matrix.dtype)
    for start in range(0, positions.size, block_rows):
        chunk = positions[start : start + block_rows]
        rows = block[: chunk.size]
        np.take(matrix, chunk, axis=0, out=rows)
        yield start, rows


def best_indices(scores: np.ndarray, count: int) -> np.ndarray | None:
    """Indices of the `count` highest scores, ascending; None when every score qualifies."""
    if scores.size <= count:
        return None
    subset = preselect(scores, count)
    if subset is None:
        return np.sort(np.argpartition(scores, scores.size - count)[scores.size - count :])
    best = np.argpartition(scores[subset], subset.size - count)[subset.size - count :]
    return subset[np.sort(best)]


def vector_scores_many(
    matrix: np.ndarray,
    queries: np.ndarray,
    positions: np.ndarray | None,
    scan: "Int8Scan | None" = None,
) -> np.ndarray:
    """`vector_scores` for several queries at once, as a (queries, positions) array.

    The parts of a multi-part question are scored in one pass over the matrix: each block
    of rows is read once and multiplied by all query vectors in one BLAS product, instead
    of one full pass per part (measured at 1M x 768: three vectors in 195 ms against 301 ms
    for three passes; a 10% subset 43 ms against 122 ms).
    """
    if scan is not None and _count(matrix, positions) > RESCORE_DEPTH:
        return _quantised_scores(matrix, scan, queries, positions)
    rows_of_queries = np.ascontiguousarray(queries, dtype=np.float32)

    def product(rows: np.ndarray, out: np.ndarray, column: int) -> None:
        np.matmul(rows_of_queries, rows.T, out=out[:, column : column + len(rows)])

    return _scan(matrix, positions, len(rows_of_queries), product)


# `product(rows, out, column)`: `out[j, column + i] = rows[i] . query j` for a block of rows.
Product = Callable[[np.ndarray, np.ndarray, int], object]


def _scan(
    matrix: np.ndarray, positions: np.ndarray | None, width: int, product: Product
) -> np.ndarray:
    """`product` over blocks of the rows at `positions` into a (width, positions) array: the
    subset's rows when small, else every row and then the positions' columns."""
    if positions is not None and positions.size < _SUBSET_SHARE * matrix.shape[0]:
        scores = np.empty((width, positions.size), dtype=np.float32)
        for start, rows in _row_blocks(matrix, positions):
            product(rows, scores, start)
        return scores
    scores = np.empty((width, matrix.shape[0]), dtype=np.float32)
    product(matrix, scores, 0)
    return scores if positions is None else np.ascontiguousarray(scores[:, positions])


def _quantised_scores(
    matrix: np.ndarray, scan: "Int8Scan", queries: np.ndarray, positions: np.ndarray | None
) -> np.ndarray:
    """Quantised estimates for every position (`Int8Scan.dot_products`), then the exact
    float32 cosine for each query's best `RESCORE_DEPTH` (their rows read in ascending
    order: a mapped matrix pages in sequentially)."""
    query_codes, factors = scan.codes.quantise_queries(np.asarray(queries, dtype=np.float32))
    scores = scan.dot_products(query_codes, positions)
    scores *= factors[:, None]
    for estimates, query in zip(scores, queries, strict=True):
        best = best_indices(estimates, RESCORE_DEPTH)
        if best is None:
            best = np.arange(estimates.size)
        rows = best if positions is None else positions[best]
        estimates[best] = dot_scores(matrix[rows], query)
    return scores


class SearchesInFlight:
    """How many searches this process runs now, for the kernel's choice of threads.

    A search alone scans on every core (984,175 x 768: 23 ms on two threads, 27 on one);
    beside others, on one thread, which costs less CPU per pass (27 ms against 2 x 23) and
    leaves the other cores to them. 8 MCP clients at 1M, three interleaved runs each:
    35.4-37.9 queries/s with every pass on two threads, 38.6-40.9 on one, 39.3-44.1 choosing
    by the searches in flight; when the host gave the VM more memory bandwidth (one pass
    12 ms on two threads), 52.9-53.6 on two against 56.6-57.6 choosing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @contextmanager
    def search(self) -> Iterator[None]:
        """Counts one search while the block runs."""
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def scan_threads(self) -> int:
        return SCAN_THREADS if self._count <= 1 else 1


SEARCHES = SearchesInFlight()


@dataclass
class _PassRequest:
    """One search's query codes waiting for a full pass, and what the pass gave it."""

    query_codes: np.ndarray
    turn: threading.Event
    scores: np.ndarray | None = None
    error: BaseException | None = None


class Int8Scan:
    """An artifact's int8 codes, and the passes over every row that concurrent searches share.

    A search that needs a full pass while another's runs waits, and the next pass scores the
    waiting searches' queries together (up to `PASS_QUERIES`): with the kernel, eight
    queries cost about 1.4 passes for one. The oldest waiting search runs that pass; the
    others sleep until their scores are in, then each refines its own best rows. Passes over
    a filtered subset are not shared (their rows differ) and read the int8 codes.
    """

    def __init__(self, codes: Int8Codes):
        self.codes = codes
        self.uses_kernel = kernel_runs(codes.codes.shape[1])
        self._lock = threading.Lock()
        self._waiting: deque[_PassRequest] = deque()
        self._passing = False

    def dot_products(self, query_codes: np.ndarray, positions: np.ndarray | None) -> np.ndarray:
        """Integer dot products of int8 `query_codes` with the codes at `positions` (None:
        every row), as a float32 (queries, positions) array."""
        codes = self.codes.codes
        if positions is None or positions.size >= _SUBSET_SHARE * codes.shape[0]:
            scores = self._shared_pass(query_codes)
            if positions is not None:
                scores = np.ascontiguousarray(scores[:, positions])
            if self.uses_kernel:
                self._refine(scores, query_codes, positions)
            return scores
        if self.uses_kernel:
            return _kernel_products(codes, query_codes, positions, SEARCHES.scan_threads())
        return _scan(codes, positions, len(query_codes), _simsimd_product(query_codes))

    def _refine(
        self, scores: np.ndarray, query_codes: np.ndarray, positions: np.ndarray | None
    ) -> None:
        """Replace each query's best `NIBBLE_DEPTH` nibble estimates with int8 products,
        on this search's own thread (outside the shared pass)."""
        for row_scores, query in zip(scores, query_codes, strict=True):
            best = best_indices(row_scores, NIBBLE_DEPTH)
            if best is None:
                best = np.arange(row_scores.size)
            rows = best if positions is None else positions[best]
            row_scores[best] = _kernel_products(self.codes.codes, query[None, :], rows, 1)[0]

    def _shared_pass(self, query_codes: np.ndarray) -> np.ndarray:
        request = _PassRequest(query_codes, threading.Event())
        with self._lock:
            self._waiting.append(request)
            waits = self._passing
            self._passing = True
        if waits:
            request.turn.wait()
        if request.scores is None and request.error is None:
            self._run_pass()
        if request.error is not None:
            raise request.error
        assert request.scores is not None
        return request.scores

    def _run_pass(self) -> None:
        """One pass for the oldest waiting search and those that fit beside it; then the
        next oldest, if any, takes its turn to run the next."""
        with self._lock:
            batch = [self._waiting.popleft()]
            width = len(batch[0].query_codes)
            while self._waiting and width + len(self._waiting[0].query_codes) <= PASS_QUERIES:
                width += len(self._waiting[0].query_codes)
                batch.append(self._waiting.popleft())
        try:
            stacked = np.concatenate([request.query_codes for request in batch])
            scores = (
                _nibble_products(self.codes.nibbles, stacked, SEARCHES.scan_threads())
                if self.uses_kernel
                else _scan(self.codes.codes, None, len(stacked), _simsimd_product(stacked))
            )
            start = 0
            for request in batch:
                request.scores = scores[start : start + len(request.query_codes)]
                start += len(request.query_codes)
        except BaseException as error:
            for request in batch:
                request.error = error
        finally:
            with self._lock:
                successor = self._waiting[0] if self._waiting else None
                self._passing = successor is not None
            for request in batch:
                request.turn.set()
            if successor is not None:
                successor.turn.set()


def _simsimd_product(query_codes: np.ndarray) -> Product:
    def product(rows: np.ndarray, out: np.ndarray, column: int) -> None:
        # Not `cdist(..., out=out)`: simsimd 6.5 returns None from that path without a new
        # reference, so every call takes one from None's count until Python 3.11 aborts
        # ("deallocating None") after enough searches.
        found = simsimd.cdist(
            rows, query_codes, metric="dot", out_dtype="float32", threads=SCAN_THREADS
        )
        out[:, column : column + len(rows)] = np.asarray(found).T

    return product


class _KernelThreads:
    """The pool kernel ranges run on, one per process: a forked child (a pre-forking server,
    a multiprocessing worker) inherits the parent's pool object without its threads, and
    work submitted to it would never run, so the child starts a pool of its own."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="int8-scan")
                self._pid = os.getpid()
            return self._pool


_kernel_threads = _KernelThreads()


# `run(group, out, bounds)`: one kernel call for a group of queries over a range of positions.
RangeRun = Callable[[np.ndarray, np.ndarray, tuple[int, int]], None]


def _kernel_products(
    codes: np.ndarray, query_codes: np.ndarray, positions: np.ndarray | None, threads: int
) -> np.ndarray:
    """The kernel's (queries, positions) int8 products. Rows are read in place, so a
    filtered subset costs no copy."""
    rows = None if positions is None else np.ascontiguousarray(positions, dtype=np.int64)

    def run(group: np.ndarray, out: np.ndarray, bounds: tuple[int, int]) -> None:
        assert _int8dot is not None
        _int8dot.dot_rows(codes, group, out, codes.shape[1], *bounds, rows)

    count = codes.shape[0] if positions is None else positions.size
    return _in_ranges(run, query_codes, count, threads)


def _nibble_products(nibbles: np.ndarray, query_codes: np.ndarray, threads: int) -> np.ndarray:
    """The kernel's (queries, rows) int4 products with every row, in int8 units."""
    dimension = query_codes.shape[1]

    def run(group: np.ndarray, out: np.ndarray, bounds: tuple[int, int]) -> None:
        assert _int8dot is not None
        _int8dot.dot_nibbles(nibbles, group, out, dimension, *bounds, NIBBLE_SCALE)

    return _in_ranges(run, query_codes, nibbles.shape[0], threads)


def _in_ranges(run: RangeRun, query_codes: np.ndarray, count: int, threads: int) -> np.ndarray:
    """`run` for `PASS_QUERIES` queries at a time into one (queries, count) array: on the
    calling thread, or on `threads` of the pool over ranges of the positions (the kernel
    releases the GIL)."""
    pieces = threads * _RANGES_PER_THREAD if threads > 1 else 1
    bounds = np.linspace(0, count, pieces + 1).astype(int)
    ranges = [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]
    scores = np.empty((len(query_codes), count), dtype=np.float32)
    for first in range(0, len(query_codes), PASS_QUERIES):
        group = np.ascontiguousarray(query_codes[first : first + PASS_QUERIES])
        # Consecutive rows of `scores`: one C-contiguous (group, count) block.
        work = functools.partial(run, group, scores[first : first + len(group)])
        list(_kernel_threads.pool().map(work, ranges) if len(ranges) > 1 else map(work, ranges))
    return scores


class QueryEmbedder:
    """Embeds query text once per distinct text (small LRU) and enforces the generation."""

    def __init__(self, factory: Callable[[], Embedder], cache_size: int = 1024):
        self._factory = factory
        self._embedder: Embedder | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        """The configured embedder, created on first use (loading a model takes time)."""
        with self._lock:
            if self._embedder is None:
                self._embedder = self._factory()
            return self._embedder

    def forget(self) -> None:
        """Drop every cached query vector (the evaluation times first-time embeddings)."""
        with self._lock:
            self._cache.clear()

    def embed(self, text: str, generation_id: str, dimension: int) -> np.ndarray:
        """The normalised float32 query vector, after checking the embedder's generation."""
        return self.embed_many([text], generation_id, dimension)[0]

    def embed_many(self, texts: list[str], generation_id: str, dimension: int) -> np.ndarray:
        """`embed` for several texts, as rows; the uncached ones go to the model in one call.

        A multi-part question embeds its parts with the whole question: one batch of three
        texts costs the packaged pair 63 ms against 71 ms one by one (measured), and gives
        the same vectors (the models embed each text independently of its batch).
        """
        embedder = self.embedder
        ensure_same_generation(embedder.identity, generation_id)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                cached = self._cache.get(text)
                if cached is not None:
                    self._cache.move_to_end(text)
                    found[text] = cached
        missing = [text for text in dict.fromkeys(texts) if text not in found]
        if missing:
            vectors = np.asarray(embedder.embed_queries(missing), dtype=np.float32)
            vectors = vectors.reshape(len(missing), -1)
            if vectors.shape[1] != dimension:
                raise SlackqueryError(
                    f"query vector has {vectors.shape[1]} dimensions, "
                    f"artifact vectors have {dimension}"
                )
            norms = np.linalg.norm(vectors, axis=1)
            if not np.all(np.isfinite(norms)) or np.any(norms == 0.0):
                raise SlackqueryError("the embedder returned an empty or invalid query vector")
            with self._lock:
                for text, vector, norm in zip(missing, vectors, norms, strict=True):
                    found[text] = vector / norm
                    self._cache[text] = found[text]
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return np.stack([found[text] for text in texts])
