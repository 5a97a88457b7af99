"""BM25 over the artifact's postings (CSR arrays the build wrote; see
`slackquery.artifacts.postings`): dense, sparse, or stopping early for the best rows.

Scores equal DuckDB's `match_bm25` (same idf, k1 = 1.2, b = 0.75, distinct query terms);
tests check it. The best rows come from serving/_bm25.c (document-at-a-time MaxScore) where
it was built, else from impact-ordered prefixes in NumPy; both return the same rows and
scores.
"""

from dataclasses import dataclass

import numpy as np

from serving.query import content_tokens
from slackquery.artifacts.packed import SortedKeys
from slackquery.artifacts.postings import Postings, bm25_idf

try:
    from serving import _bm25  # built by setup.py where a C compiler is present
except ImportError:  # pragma: no cover - depends on the install
    _bm25 = None

# Postings of more than 1/DENSE_SHARE of the row count are summed in a dense accumulator.
DENSE_SHARE = 8
# A term's postings are spread into a dense array, rather than binary-searched once per row
# to score, when they number fewer than LOOKUP_COST times those rows (measured at 1M rows:
# a search costs ~50 ns per row, a spread posting ~6 ns).
LOOKUP_COST = 9
# Prefixes of more than 1/UNION_BITMAP_SHARE of the row count are merged by marking rows in
# a bitmap instead of sorting them (measured at 1M rows: 146k rows 1.0 ms against 4.0).
UNION_BITMAP_SHARE = 16
# Queries with at most this many postings in all are scored exhaustively: reading them
# costs less than the bookkeeping of stopping early.
EXHAUSTIVE_POSTINGS = 4096
# Impact-order postings per term that the probe reads, as a multiple of the rows asked for.
FIRST_DEPTH_FACTOR = 4
# serving/_bm25.c sums every posting term at a time, instead of walking rows, for queries of
# several terms with between 1/SUMS_MIN_SHARE and 1/SUMS_MAX_SHARE of the row count in
# postings and no filter leaving fewer than half the rows. Measured at 1M rows over the
# serving benchmark's 200 queries (2026-12-04, load 0.4): the sums cost ~0.5 ms for the pass
# over every row plus ~1.3 ns a posting, the walk grows with the common words a query holds
# ("how did we fix the failed ... accuracy problem", six: walk 4.5, sums 0.9 ms); below
# 1/16 of the rows in postings the walk is cheaper (0.14-0.5 ms), above 1/2 or with a
# narrow filter the pass over every row is (a filter to 1% of rows: 5 ms against 0.3).
SUMS_MIN_SHARE = 16
SUMS_MAX_SHARE = 2


@dataclass
class QueryTerms:
    """The distinct query tokens BM25 will use, and those the index has never seen."""

    known: list[str]
    unknown: list[str]
    dropped: int
    # Per known term, the factor that turns the whole index's idf into the idf over the
    # rows a requester may see (None: the whole index, the operator).
    idf_scale: list[float] | None = None


class BM25Index:
    """BM25 scoring over `Postings`: dense, sparse, or stopping early for the best rows."""

    def __init__(self, postings: Postings, row_count: int):
        self.postings = postings
        self.row_count = row_count
        # Term -> term id by binary search of the sorted vocabulary (no dict of every term).
        self.term_ids = SortedKeys(postings.terms)
        self.posting_rows = postings.rows
        self.posting_scores = postings.scores
        self.offsets = postings.offsets
        self.idf = postings.idf

    def query_terms(
        self, text: str, max_tokens: int, phrases: list[str] | tuple[str, ...] = ()
    ) -> QueryTerms:
        """Distinct content tokens of `text` (`content_tokens`: stop words dropped unless
        quoted or the query has nothing else), capped at `max_tokens`, split into
        known/unknown."""
        distinct = list(dict.fromkeys(content_tokens(text, phrases)))
        kept = distinct[:max_tokens]
        return QueryTerms(
            known=[token for token in kept if token in self.term_ids],
            unknown=[token for token in kept if token not in self.term_ids],
            dropped=len(distinct) - len(kept),
        )

    def _spans(self, terms: list[str]) -> list[tuple[int, int]]:
        return [
            (int(self.offsets[term_id]), int(self.offsets[term_id + 1]))
            for term_id in (self.term_ids[term] for term in terms)
        ]

    @staticmethod
    def idf_of(df: np.ndarray, num_docs: int) -> np.ndarray:
        """BM25 idf for document frequencies out of `num_docs` (see `bm25_idf`)."""
        return bm25_idf(df, num_docs)

    def _posting_scores(self, span: tuple[int, int], scale: float | None) -> np.ndarray:
        start, end = span
        values = self.posting_scores[start:end]
        return values if scale is None else values * np.float32(scale)

    def score(self, terms: list[str], idf_scale: list[float] | None = None) -> np.ndarray:
        """BM25 score of every artifact row for these (distinct, known) terms; 0 = no match."""
        scores = np.zeros(self.row_count, dtype=np.float32)
        scales = idf_scale or [None] * len(terms)
        for span, scale in zip(self._spans(terms), scales, strict=True):
            # Postings of one term hold each row once, so fancy-index += is safe here.
            scores[self.posting_rows[span[0] : span[1]]] += self._posting_scores(span, scale)
        return scores

    def scores_of(
        self, terms: list[str], rows: np.ndarray, idf_scale: list[float] | None = None
    ) -> np.ndarray:
        """BM25 scores of these ascending rows, equal to `score`'s; costs the rows and the
        terms' postings, not the row count."""
        spans = self._spans(terms)
        return self._exact(spans, rows, idf_scale or [None] * len(spans))

    def matches(
        self, terms: list[str], idf_scale: list[float] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rows matching any term (score > 0) and their BM25 scores, equal to `score`'s.

        Costs the postings of the query's terms, not the row count: one term is a slice of
        its postings; a few rare terms are summed sparsely; long postings go through one
        dense accumulator. `idf_scale` rescales each term's idf (a requester's view).
        """
        spans = self._spans(terms)
        scales = idf_scale or [None] * len(spans)
        if not spans:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        if len(spans) == 1:
            start, end = spans[0]
            return self.posting_rows[start:end], self._posting_scores(spans[0], scales[0])
        total = sum(end - start for start, end in spans)
        if total * DENSE_SHARE >= self.row_count:
            scores = self.score(terms, idf_scale)
            rows = np.flatnonzero(scores)
            return rows, scores[rows]
        rows = self._union(spans)
        return rows, self._exact(spans, rows, scales)

    def candidates(
        self,
        terms: list[str],
        count: int,
        eligible: np.ndarray,
        idf_scale: list[float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Eligible matching rows and their scores (equal to `score`'s), among them the
        `count` best by score, ties by row; other eligible rows score strictly lower.

        A probe of each term's best postings (impact order) gives real eligible rows, so
        their `count`-th best score `theta` bounds the answer from below. A row can only
        reach `theta` if it holds a term whose cumulative best ("essential", MaxScore) and,
        for each term it holds, scores at least `theta` minus the other terms' best; those
        are prefixes in impact order, so only they are read and scored. A filter deepens the
        probe by the share of rows it keeps. Short postings, narrow filters and probes that
        find fewer than `count` rows are scored exhaustively. A requester's
        `idf_scale` multiplies every posting of a term by one factor, which keeps each
        term's impact order, so the same bounds hold on the scaled scores. Where
        serving/_bm25.c was built, it answers instead (`_compiled_candidates`).
        """
        spans = self._spans(terms)
        scales = idf_scale or [None] * len(spans)
        total = sum(end - start for start, end in spans)
        exhaustive = total <= EXHAUSTIVE_POSTINGS
        if not exhaustive and _bm25 is not None and len(spans) <= _bm25.MAX_TERMS:
            return self._compiled_candidates(spans, total, scales, count, eligible)
        if not exhaustive:
            kept = int(np.count_nonzero(eligible))
            # A filter thins out the best postings by the share of rows it keeps: the probe
            # reads that much deeper to find about as many eligible rows as without one.
            probe = -(-max(FIRST_DEPTH_FACTOR * count, 1) * self.row_count // max(kept, 1))
            # While reading the probe costs less than scoring every eligible row; deeper
            # each time it finds too few (a filter need not thin every term evenly).
            while probe * len(spans) < kept:
                rows = self._union([(start, min(start + probe, end)) for start, end in spans])
                rows = rows[eligible[rows]]
                if rows.size >= count:
                    scores = self._exact(spans, rows, scales)
                    theta = float(np.partition(scores, rows.size - count)[rows.size - count])
                    rows = self._union(self._reachable(spans, theta * (1 - 1e-6), scales))
                    rows = rows[eligible[rows]]
                    return rows, self._exact(spans, rows, scales)
                probe *= FIRST_DEPTH_FACTOR
            # Few eligible rows (a narrow filter), or few among the best postings: those
            # rows are looked up in the postings rather than every posting scored (at 1M,
            # "the for in:#deploys" took 22 ms that way).
            rows = np.flatnonzero(eligible)
            scores = self._exact(spans, rows, scales)
            matching = scores != 0
            return rows[matching], scores[matching]
        rows, scores = self.matches(terms, idf_scale)
        keep = eligible[rows]
        return rows[keep], scores[keep]

    def _compiled_candidates(
        self,
        spans: list[tuple[int, int]],
        total: int,
        scales: list[float | None],
        count: int,
        eligible: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`candidates` by serving/_bm25.c (one term in impact order, the walk, or sums term
        at a time): every eligible row reaching the `count`-th best eligible score, scored
        exactly as `score` does. `total`: the spans' postings."""
        assert _bm25 is not None
        postings = self.postings
        # The probe that sets the first threshold reads deeper by the share of rows a filter
        # keeps, to find about as many eligible rows as without one; never more postings
        # per term than there are eligible rows, which the walk leaps between anyway.
        kept = max(int(np.count_nonzero(eligible)), 1)
        depth = min(-(-FIRST_DEPTH_FACTOR * count * self.row_count // kept), kept)
        by_sums = self._sums_cheaper(len(spans), total, kept)
        rows, scores = _bm25.best_rows(
            self.posting_rows,
            self.posting_scores,
            postings.impact_rows,
            postings.impact_scores,
            np.array(spans, dtype=np.int64),
            np.array([1.0 if scale is None else scale for scale in scales], dtype=np.float32),
            np.ascontiguousarray(eligible, dtype=np.bool_),
            count,
            0 if by_sums else depth,
            by_sums,
        )
        return np.frombuffer(rows, dtype=np.int32), np.frombuffer(scores, dtype=np.float32)

    def _sums_cheaper(self, terms: int, postings: int, kept: int) -> bool:
        """Whether summing every posting beats the walk (see `SUMS_MAX_SHARE`)."""
        return (
            terms > 1
            and 2 * kept >= self.row_count
            and postings * SUMS_MAX_SHARE <= self.row_count <= postings * SUMS_MIN_SHARE
        )

    def _reachable(
        self, spans: list[tuple[int, int]], theta: float, scales: list[float | None]
    ) -> list[tuple[int, int]]:
        """Impact-order prefixes holding every row that may score `theta` or more."""
        impact = self.postings.impact_scores
        factor = np.array([1.0 if scale is None else scale for scale in scales])
        best = np.array([impact[start] for start, _ in spans], dtype=np.float64) * factor
        # Terms whose best scores together stay below theta cannot carry a row alone.
        order = np.argsort(best, kind="stable")
        optional = int(np.searchsorted(np.cumsum(best[order]), theta, side="left"))
        prefixes = []
        for term in order[optional:].tolist():
            start, end = spans[term]
            # The posting score this term needs, unscaled; the margin absorbs rounding.
            need = (theta - (best.sum() - best[term])) / factor[term] * (1 - 1e-6)
            # impact scores descend: count those >= need on the reversed (ascending) view
            below = np.searchsorted(impact[start:end][::-1], need, side="left")
            prefixes.append((start, end - int(below)))
        return prefixes

    def _union(self, spans: list[tuple[int, int]]) -> np.ndarray:
        """Distinct rows of these impact-order spans, ascending."""
        parts = [self.postings.impact_rows[start:end] for start, end in spans]
        if not parts:
            return np.zeros(0, dtype=np.int32)
        if sum(part.size for part in parts) * UNION_BITMAP_SHARE > self.row_count:
            marked = np.zeros(self.row_count, dtype=bool)
            for part in parts:
                marked[part] = True
            return np.flatnonzero(marked).astype(parts[0].dtype)
        # Sort and drop repeats: NumPy 2's hash-based `np.unique` measured ~8x slower here.
        rows = np.sort(np.concatenate(parts))
        return rows[np.concatenate(([True], rows[1:] != rows[:-1]))] if rows.size else rows

    def _exact(
        self, spans: list[tuple[int, int]], rows: np.ndarray, scales: list[float | None]
    ) -> np.ndarray:
        """Scores of these (ascending) rows, summed in term order like `score` so that both
        agree to the bit: per term, its postings are searched for the rows, or, when they
        are few next to the rows, spread into a dense array that the rows read."""
        summed = np.zeros(rows.size, dtype=np.float32)
        spread: np.ndarray | None = None
        for (start, end), scale in zip(spans, scales, strict=True):
            term_rows = self.posting_rows[start:end]
            if term_rows.size < LOOKUP_COST * rows.size:
                if spread is None:
                    spread = np.zeros(self.row_count, dtype=np.float32)
                spread[term_rows] = self._posting_scores((start, end), scale)
                summed += spread[rows]  # a row without the term adds 0.0: bit-neutral
                spread[term_rows] = 0.0
                continue
            found = np.searchsorted(term_rows, rows)
            found[found == term_rows.size] = 0
            hit = term_rows[found] == rows
            values = self.posting_scores[start:end][found[hit]]
            summed[hit] += values if scale is None else values * np.float32(scale)
        return summed

    def rows_with_all(self, terms: list[str]) -> np.ndarray:
        """Rows containing every term (phrase pre-filter), ascending."""
        result: np.ndarray | None = None
        for term in terms:
            term_id = self.term_ids.get(term)
            if term_id is None:
                return np.zeros(0, dtype=np.int32)
            rows = self.posting_rows[self.offsets[term_id] : self.offsets[term_id + 1]]
            result = rows if result is None else np.intersect1d(result, rows, assume_unique=True)
        return np.sort(result) if result is not None else np.zeros(0, dtype=np.int32)
