"""BM25 postings of the artifact's FTS index, computed once at build time as CSR arrays.

DuckDB's `match_bm25` macro re-joins the whole index on every call (53 ms at 100k
documents, 302 ms at 1M on this machine), and reading the index tables into postings took
most of a serving load. The artifact is immutable, so the build reads `dict`, `terms`,
`docs` and `stats` of `fts_main_search_documents` once and writes, per term (term ids are
ranks in the sorted vocabulary), a slice of artifact rows (ascending, int32) and of
precomputed per-posting scores (idf x BM25 tf weight, float32), plus the same postings in
impact order (score descending, then row), so a query can stop once no unread posting can
reach its best rows. Scores equal `match_bm25`'s (same idf, k1 = 1.2, b = 0.75); tests
and the GX suite `postings_arrays` check it.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np

from slackquery.artifacts import packed
from slackquery.artifacts.schema import FTS_SCHEMA

K1 = 1.2
B = 0.75
# Array name -> dtype of the numeric arrays (the vocabulary is the packed column `terms`).
DTYPES = {
    "postings.offsets": np.dtype(np.int64),
    "postings.rows": np.dtype(np.int32),
    "postings.scores": np.dtype(np.float32),
    "postings.impact_rows": np.dtype(np.int32),
    "postings.impact_scores": np.dtype(np.float32),
    "postings.idf": np.dtype(np.float32),
    **packed.dtypes("terms"),
}


def bm25_idf(df: np.ndarray, num_docs: int) -> np.ndarray:
    """BM25 idf for document frequencies out of `num_docs`; DuckDB's `log` is base 10, and
    matching it keeps scores equal to `match_bm25`."""
    return np.log10((num_docs - df + 0.5) / (df + 0.5) + 1.0).astype(np.float32)


def bm25_weights(tf: np.ndarray, doc_len: np.ndarray, avgdl: float) -> np.ndarray:
    """BM25's tf weight (k1 = 1.2, b = 0.75) of term frequencies in documents of these
    lengths; times the term's idf it is the posting's score."""
    norm = K1 * (1.0 - B + B * doc_len / avgdl)
    return tf * (K1 + 1.0) / (tf + norm)


@dataclass(frozen=True)
class Postings:
    """The index as arrays: term `t` (the t-th of `terms`, which ascend) has the postings
    `[offsets[t], offsets[t + 1])` of `rows`/`scores` (rows ascending) and of
    `impact_rows`/`impact_scores` (scores descending, ties by ascending row)."""

    terms: Sequence[str]
    offsets: np.ndarray
    rows: np.ndarray
    scores: np.ndarray
    impact_rows: np.ndarray
    impact_scores: np.ndarray
    # Each term's idf over the whole index (for a requester's rescaled view); None when the
    # postings were built from scores alone.
    idf: np.ndarray | None = None

    @classmethod
    def from_fts(cls, connection: duckdb.DuckDBPyConnection) -> "Postings":
        """Read the artifact's FTS tables; rows are `search_documents` in document_id order."""
        stats = connection.execute(f"select num_docs, avgdl from {FTS_SCHEMA}.stats").fetchone()
        if stats is None:
            raise ValueError("artifact FTS index has no stats row")
        num_docs, avgdl = int(stats[0]), float(stats[1]) or 1.0
        postings = connection.execute(
            f"""
            with rows_by_id as (
                select document_id, row_number() over (order by document_id) - 1 as row_index
                from search_documents
            ),
            tf as (
                select termid, docid, count(*) as tf
                from {FTS_SCHEMA}.terms
                group by termid, docid
            )
            select
                tf.termid::integer as termid,
                rows_by_id.row_index::integer as row_index,
                tf.tf::integer as tf,
                docs.len::integer as len
            from tf
            inner join {FTS_SCHEMA}.docs as docs on docs.docid = tf.docid
            inner join rows_by_id on rows_by_id.document_id = docs.name
            """
        ).fetchnumpy()
        vocabulary = connection.execute(
            f"select termid, term, df from {FTS_SCHEMA}.dict order by termid"
        ).fetchnumpy()
        term_ids = vocabulary["termid"].astype(np.int64)
        term_index = np.full(int(term_ids.max(initial=-1)) + 1, -1, dtype=np.int32)
        term_index[term_ids] = np.arange(len(term_ids))
        idf = bm25_idf(vocabulary["df"].astype(np.float64), num_docs)
        # 32-bit columns, each freed once used: the postings of 1M messages are 16M entries.
        term_of_posting = term_index[postings.pop("termid")]
        weights = bm25_weights(
            postings.pop("tf").astype(np.float32), postings.pop("len").astype(np.float32), avgdl
        )
        scores = (idf[term_of_posting] * weights).astype(np.float32)
        del weights
        rows = postings.pop("row_index")
        return cls.build(vocabulary["term"].tolist(), term_of_posting, rows, scores, idf)

    @classmethod
    def build(
        cls,
        terms: list[str],
        term_of_posting: np.ndarray,
        rows: np.ndarray,
        scores: np.ndarray,
        idf: np.ndarray | None = None,
    ) -> "Postings":
        """Postings from one (index into `terms`, row, score) triple per posting, any order.

        Terms are renumbered by their sorted order, so a reader finds a term by binary
        search over the packed vocabulary rather than a dict of every term.
        """
        order = sorted(range(len(terms)), key=terms.__getitem__)
        rank = np.empty(len(terms), dtype=np.int32)
        rank[order] = np.arange(len(terms))
        term_of_posting = rank[term_of_posting]
        by_term = np.lexsort((rows, term_of_posting))
        term_of_posting, rows, scores = term_of_posting[by_term], rows[by_term], scores[by_term]
        # Each temporary goes once used: at 1M messages (16M postings) the build's peak
        # anonymous memory here fell from 2.0-2.3 to 1.3-1.6 GiB.
        del by_term
        offsets = np.searchsorted(term_of_posting, np.arange(len(terms) + 1)).astype(np.int64)
        # Impact order: one stable sort by (term, descending score) keeps rows ascending
        # within equal scores. Non-negative float32 bits sort like their values.
        key = term_of_posting.astype(np.uint64)
        del term_of_posting
        key <<= np.uint64(32)
        key |= np.subtract(np.uint32(0xFFFFFFFF), scores.view(np.uint32))
        impact = np.argsort(key, kind="stable")
        del key
        return cls(
            terms=[terms[index] for index in order],
            offsets=offsets,
            rows=rows.astype(np.int32, copy=False),
            scores=scores,
            impact_rows=rows[impact].astype(np.int32),
            impact_scores=scores[impact],
            idf=None if idf is None else idf[order],
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays the build writes (names as in `DTYPES`)."""
        assert self.idf is not None, "postings written to an artifact carry their idf"
        return {
            "postings.offsets": self.offsets,
            "postings.rows": self.rows,
            "postings.scores": self.scores,
            "postings.impact_rows": self.impact_rows,
            "postings.impact_scores": self.impact_scores,
            "postings.idf": self.idf,
            **packed.pack("terms", self.terms),
        }

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "Postings":
        """Postings over the arrays `arrays()` wrote (maps, when read from an artifact);
        ValueError unless their lengths agree."""
        terms = packed.PackedStrings(arrays, "terms")
        offsets, count = arrays["postings.offsets"], len(arrays["postings.rows"])
        per_posting = ("scores", "impact_rows", "impact_scores")
        if (
            len(offsets) != len(terms) + 1
            or offsets[-1] != count
            or len(arrays["postings.idf"]) != len(terms)
            or any(len(arrays[f"postings.{name}"]) != count for name in per_posting)
        ):
            raise ValueError(f"postings of {len(terms)} terms have arrays of other lengths")
        return cls(
            terms=terms,
            offsets=arrays["postings.offsets"],
            rows=arrays["postings.rows"],
            scores=arrays["postings.scores"],
            impact_rows=arrays["postings.impact_rows"],
            impact_scores=arrays["postings.impact_scores"],
            idf=arrays["postings.idf"],
        )
