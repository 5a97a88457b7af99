"""`postings_arrays`: the BM25 postings beside the artifact agree with its FTS index.

Serving scores lexical search from these maps, never with `match_bm25`, so the index's
checks say nothing about what is served unless the postings match it: as many terms as
the index's `dict`, in strictly ascending order; as many postings as distinct (term,
document) pairs of its `terms`; and, for the most frequent terms and an evenly spread
sample of the others, the rows the term's postings list equal the rows `match_bm25`
finds for it, with equal scores, and the impact order is those postings by descending
score, ties by row.
"""

from collections.abc import Iterator

import duckdb
import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from expectations.suites import Artifact, document_rows
from slackquery.artifacts import arrays, packed, schema
from slackquery.artifacts.postings import Postings
from slackquery.errors import SlackqueryError

TABLE = "postings_arrays"
ID_COLUMNS = ["term"]
SAMPLE_TERMS = 20
FREQUENT_TERMS = 3
# float32 posting scores against DuckDB's double ones.
SCORE_TOLERANCE = 1e-5
TERM_COLUMNS = ("term", "rows_match", "scores_match", "impact_ordered")


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per sampled term."""
    suite = gx.ExpectationSuite(name=TABLE)
    for column, description in (
        ("arrays_readable", "the arrays folder beside the artifact opens, shapes agreeing"),
        ("terms_ascending", "the vocabulary ascends strictly (lookups binary-search it)"),
        ("rows_match", "a sampled term's postings list the rows match_bm25 finds for it"),
        ("scores_match", "a sampled term's posting scores equal match_bm25's"),
        ("impact_ordered", "a sampled term's impact order is its postings by descending score"),
    ):
        suite.add_expectation(
            gxe.ExpectColumnValuesToBeInSet(
                column=column, value_set=[True], description=description
            )
        )
    for column_a, column_b, description in (
        ("term_count", "fts_term_count", "as many terms as the FTS dict"),
        ("posting_count", "fts_posting_count", "as many postings as distinct (term, document)"),
    ):
        suite.add_expectation(
            gxe.ExpectColumnPairValuesToBeEqual(
                column_A=column_a, column_B=column_b, description=description
            )
        )
    return suite


def _fts_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    row = conn.execute(
        f"""
        select
            (select count(*) from {schema.FTS_SCHEMA}.dict),
            (select count(*) from (select distinct termid, docid from {schema.FTS_SCHEMA}.terms))
        """
    ).fetchone()
    assert row is not None
    return {"fts_term_count": int(row[0]), "fts_posting_count": int(row[1])}


def _matches(conn: duckdb.DuckDBPyConnection, term: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows (in `document_id` order) and scores `match_bm25` gives the one-term query."""
    found = conn.execute(
        f"""
        select row_index, score from (
            select row_index, {schema.FTS_SCHEMA}.match_bm25(document_id, $term) as score
            from {document_rows(conn)}
        )
        where score is not null
        order by row_index
        """,
        {"term": term},
    ).fetchnumpy()
    return found["row_index"].astype(np.int64), found["score"].astype(np.float64)


def _sampled_terms(postings: Postings) -> list[int]:
    """The most frequent term ids and an even spread over the vocabulary."""
    lengths = np.diff(postings.offsets)
    frequent = np.argsort(-lengths, kind="stable")[:FREQUENT_TERMS]
    spread = np.linspace(0, len(lengths) - 1, min(len(lengths), SAMPLE_TERMS)).astype(int)
    return sorted(set(frequent.tolist()) | set(spread.tolist()))


def _term_row(conn: duckdb.DuckDBPyConnection, postings: Postings, term_id: int) -> dict:
    span = slice(postings.offsets[term_id], postings.offsets[term_id + 1])
    rows, scores = postings.rows[span], postings.scores[span]
    term = postings.terms[term_id]
    expected_rows, expected_scores = _matches(conn, term)
    same_rows = np.array_equal(rows, expected_rows)
    order = np.lexsort((rows, -scores))
    return {
        "term": term,
        "rows_match": same_rows,
        # Scores of other rows compare nothing: null, which GX skips.
        "scores_match": bool(np.allclose(scores, expected_scores, rtol=SCORE_TOLERANCE, atol=0))
        if same_rows
        else None,
        "impact_ordered": np.array_equal(postings.impact_rows[span], rows[order])
        and np.array_equal(postings.impact_scores[span], scores[order]),
    }


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """One batch: a row per sampled term, each carrying the whole-index facts."""
    try:
        postings = arrays.open_arrays(artifact.arrays).postings
    except SlackqueryError:
        # Only the unreadable folder fails: every other check is null, so GX skips it.
        yield pd.DataFrame({column: [None] for column in TERM_COLUMNS}).assign(
            arrays_readable=False,
            terms_ascending=None,
            term_count=None,
            fts_term_count=None,
            posting_count=None,
            fts_posting_count=None,
        )
        return
    facts = {
        "arrays_readable": True,
        "terms_ascending": packed.is_strictly_ascending(postings.terms),
        "term_count": len(postings.terms),
        "posting_count": len(postings.rows),
        # Without an index (its own suite fails) the counts stay null and fail here too.
        **(
            _fts_counts(artifact.conn)
            if artifact.has_fts
            else {"fts_term_count": None, "fts_posting_count": None}
        ),
    }
    sampled = (
        [_term_row(artifact.conn, postings, term) for term in _sampled_terms(postings)]
        if artifact.has_fts
        else []
    )
    frame = pd.DataFrame(sampled or {column: [None] for column in TERM_COLUMNS})
    yield frame.assign(**facts)
