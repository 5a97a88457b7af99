"""BM25 over the artifact's own FTS index, held in memory as numpy postings.

DuckDB's `match_bm25` macro re-joins the whole index on every call (53 ms at 100k
documents, 302 ms at 1M on this machine). The artifact is immutable, so the index tables
(`dict`, `terms`, `docs`, `stats` of `fts_main_search_documents`) are read once per
artifact into postings whose per-posting score (idf x BM25 tf weight) is precomputed, so a
query only gathers and sums the postings of its terms. Scores equal
`match_bm25`'s (same idf, k1 = 1.2, b = 0.75, distinct query terms); a test checks it.
"""

from dataclasses import dataclass

import duckdb
import numpy as np

from serving.query import content_tokens

K1 = 1.2
B = 0.75
FTS_SCHEMA = "fts_main_search_documents"
# Postings of more than 1/DENSE_SHARE of the row count are summed in a dense accumulator.
DENSE_SHARE = 8


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
    """Postings for every term: artifact row indices and per-posting BM25 tf weights."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, row_count: int):
        stats = connection.execute(f"select num_docs, avgdl from {FTS_SCHEMA}.stats").fetchone()
        if stats is None:
            raise ValueError("artifact FTS index has no stats row")
        self.num_docs = int(stats[0])
        avgdl = float(stats[1]) or 1.0
        # FTS docids -> artifact rows (rows are search_documents in document_id order).
        docs = connection.execute(
            f"""
            with rows_by_id as (
                select document_id, row_number() over (order by document_id) - 1 as row_index
                from search_documents
            )
            select docs.docid, rows_by_id.row_index, docs.len
            from {FTS_SCHEMA}.docs as docs
            inner join rows_by_id on rows_by_id.document_id = docs.name
            """
        ).fetchnumpy()
        docid = docs["docid"].astype(np.int64)
        docid_to_row = np.full(int(docid.max(initial=-1)) + 1, -1, dtype=np.int64)
        docid_to_row[docid] = docs["row_index"].astype(np.int64)
        doc_len = np.zeros(row_count, dtype=np.float32)
        doc_len[docs["row_index"].astype(np.int64)] = docs["len"].astype(np.float32)

        vocabulary = connection.execute(
            f"select termid, term, df from {FTS_SCHEMA}.dict order by termid"
        ).fetchnumpy()
        self.term_ids: dict[str, int] = dict(
            zip(vocabulary["term"].tolist(), vocabulary["termid"].tolist(), strict=True)
        )
        term_count = int(vocabulary["termid"].max(initial=-1)) + 1
        df = np.zeros(term_count, dtype=np.float64)
        df[vocabulary["termid"].astype(np.int64)] = vocabulary["df"].astype(np.float64)
        # DuckDB's `log` is base 10; matching it keeps scores equal to `match_bm25`.
        self.idf = self.idf_of(df, self.num_docs)

        postings = connection.execute(
            f"""
            select termid, docid, count(*) as tf
            from {FTS_SCHEMA}.terms
            group by termid, docid
            order by termid, docid
            """
        ).fetchnumpy()
        term_of_posting = postings["termid"].astype(np.int64)
        rows = docid_to_row[postings["docid"].astype(np.int64)]
        tf = postings["tf"].astype(np.float32)
        norm = K1 * (1.0 - B + B * doc_len[rows] / avgdl)
        self.posting_rows = rows.astype(np.int64)
        weights = tf * (K1 + 1.0) / (tf + norm)
        # idf x tf weight per posting: a query gathers and adds these, nothing else.
        self.posting_scores = (self.idf[term_of_posting] * weights).astype(np.float32)
        self.offsets = np.searchsorted(term_of_posting, np.arange(term_count + 1)).astype(np.int64)
        self.row_count = row_count

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
        """BM25 idf (DuckDB's, base 10) for document frequencies out of `num_docs`."""
        return np.log10((num_docs - df + 0.5) / (df + 0.5) + 1.0).astype(np.float32)

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
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if len(spans) == 1:
            start, end = spans[0]
            return self.posting_rows[start:end], self._posting_scores(spans[0], scales[0])
        total = sum(end - start for start, end in spans)
        if total * DENSE_SHARE >= self.row_count:
            scores = self.score(terms, idf_scale)
            rows = np.flatnonzero(scores)
            return rows, scores[rows]
        rows = np.concatenate([self.posting_rows[start:end] for start, end in spans])
        values = np.concatenate(
            [self._posting_scores(span, scale) for span, scale in zip(spans, scales, strict=True)]
        )
        unique_rows, position = np.unique(rows, return_inverse=True)
        # Sum in term order like `score` (float32, one term at a time) so both agree exactly.
        summed = np.zeros(unique_rows.size, dtype=np.float32)
        offset = 0
        for start, end in spans:
            length = end - start
            summed[position[offset : offset + length]] += values[offset : offset + length]
            offset += length
        return unique_rows, summed

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
