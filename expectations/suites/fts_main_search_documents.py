"""`fts_main_search_documents`: the BM25 index exists, covers every document, and answers.

Canary queries run the index's own `match_bm25` macro, the way serving does:
- frequent terms: the most common non-trivial terms must match exactly as many documents
  as the index's document frequency says;
- round trips: for a few documents spread over the table, the document's rarest term must
  find that document.
"""

from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd

from expectations.suites import Artifact, param
from slackquery.artifacts import schema

TABLE = schema.FTS_SCHEMA
ID_COLUMNS = ["canary"]
FREQUENT_TERMS = 3
ROUND_TRIP_DOCUMENTS = 3


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per canary query."""
    suite = gx.ExpectationSuite(name=TABLE)
    for expectation in (
        gxe.ExpectColumnValuesToBeInSet(
            column="index_present", value_set=[True], description="the FTS index exists"
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="indexed_documents",
            min_value=param("document_count"),
            max_value=param("document_count"),
            description="the index holds every document",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="hits", min_value=1, description="canary queries return hits"
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="hits",
            column_B="expected_hits",
            row_condition='kind=="frequent_term"',
            condition_parser="pandas",
            description="a frequent term matches as many documents as its document frequency",
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="target_found",
            value_set=[True],
            row_condition='kind=="round_trip"',
            condition_parser="pandas",
            description="a document's rarest term finds that document",
        ),
    ):
        suite.add_expectation(expectation)
    return suite


def _hits(artifact: Artifact, query: str, target: str | None) -> tuple[int, bool]:
    row = artifact.conn.execute(
        f"""
        select count(*), coalesce(bool_or(document_id = $target), false)
        from (
            select document_id, {TABLE}.match_bm25(document_id, $query) as score
            from search_documents
        )
        where score is not null
        """,
        {"query": query, "target": target},
    ).fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """One row per canary query (or one failing row when the index is missing)."""
    columns = [
        "canary",
        "kind",
        "query",
        "hits",
        "expected_hits",
        "target_found",
        "index_present",
        "indexed_documents",
    ]
    if not artifact.has_fts:
        yield pd.DataFrame([["index", "index", "", 0, 0, False, False, 0]], columns=columns)
        return
    conn = artifact.conn
    indexed_row = conn.execute(f"select count(*) from {TABLE}.docs").fetchone()
    indexed = int(indexed_row[0]) if indexed_row else 0
    rows = []
    frequent = conn.execute(
        f"""
        select term, df from {TABLE}.dict
        where length(term) >= 3 and not regexp_full_match(term, '[0-9]+')
        order by df desc, term
        limit {FREQUENT_TERMS}
        """
    ).fetchall()
    for term, df in frequent:
        hits, _ = _hits(artifact, term, None)
        rows.append([f"term:{term}", "frequent_term", term, hits, int(df), True, True, indexed])
    total_row = conn.execute("select count(*) from search_documents").fetchone()
    total = int(total_row[0]) if total_row else 0
    step = max(total // ROUND_TRIP_DOCUMENTS, 1)
    samples = conn.execute(
        f"""
        with sampled as (
            select document_id, text_lexical from search_documents
            where rowid % {step} = 0 limit {ROUND_TRIP_DOCUMENTS}
        ),
        tokens as (
            select document_id, unnest({TABLE}.tokenize(text_lexical)) as term from sampled
        )
        select tokens.document_id, arg_min(tokens.term, dict.df)
        from tokens
        inner join {TABLE}.dict as dict on tokens.term = dict.term
        group by 1
        order by 1
        """
    ).fetchall()
    for document_id, term in samples:
        hits, found = _hits(artifact, term, document_id)
        rows.append([f"doc:{document_id}", "round_trip", term, hits, hits, found, True, indexed])
    if not rows:
        rows.append(["none", "frequent_term", "", 0, 1, False, True, indexed])
    yield pd.DataFrame(rows, columns=columns)
