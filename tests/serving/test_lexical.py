"""BM25 postings: stopping early gives the same best rows and scores as scoring every row."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import serving.lexical
from serving.lexical import BM25Index, Postings
from serving.ranking import top_candidates

ROWS = 20_000


def generated_index(seed: int, term_count: int = 40) -> BM25Index:
    """Terms with document frequencies from 3 to ~10,000 and few distinct scores (ties)."""
    rng = np.random.default_rng(seed)
    terms, term_ids, rows, scores = [], [], [], []
    for term_id in range(term_count):
        df = int(min(ROWS // 2, 3 + rng.zipf(1.4) * 40))
        term_rows = rng.choice(ROWS, df, replace=False)  # not in row order: build sorts
        terms.append(f"t{term_id}")
        term_ids.append(np.full(df, term_id))
        rows.append(term_rows)
        scores.append(rng.integers(1, 6, df).astype(np.float32) * 0.37)
    postings = Postings.build(
        terms, np.concatenate(term_ids), np.concatenate(rows), np.concatenate(scores)
    )
    return BM25Index(postings, ROWS)


def test_postings_are_in_row_and_impact_order() -> None:
    index = generated_index(0)
    postings = index.postings
    for term_id in range(len(postings.terms)):
        span = slice(postings.offsets[term_id], postings.offsets[term_id + 1])
        rows, impact_rows = postings.rows[span], postings.impact_rows[span]
        assert np.all(np.diff(rows) > 0)
        order = np.lexsort((rows, -postings.scores[span]))
        assert impact_rows.tolist() == rows[order].tolist()
        assert postings.impact_scores[span].tolist() == postings.scores[span][order].tolist()


NEEDS_C = pytest.mark.skipif(serving.lexical._bm25 is None, reason="serving/_bm25.c not built")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "path",
    # serving/_bm25.c's walk, then its sums; then NumPy's prefixes as measured, every term
    # searched and every union sorted, and the reverse.
    [
        pytest.param("walk", marks=NEEDS_C),
        pytest.param("sums", marks=NEEDS_C),
        "measured",
        "searched",
        "spread",
    ],
)
def test_candidates_hold_the_best_rows_of_a_full_scoring(
    monkeypatch: pytest.MonkeyPatch, seed: int, path: str
) -> None:
    monkeypatch.setattr(serving.lexical, "EXHAUSTIVE_POSTINGS", 64)
    if path in ("walk", "sums"):
        sums = path == "sums"
        monkeypatch.setattr(BM25Index, "_sums_cheaper", lambda *_: sums)
    else:
        monkeypatch.setattr(serving.lexical, "_bm25", None)
    if path in ("searched", "spread"):
        knob = 0 if path == "searched" else 10**9
        monkeypatch.setattr(serving.lexical, "LOOKUP_COST", knob)
        monkeypatch.setattr(serving.lexical, "UNION_BITMAP_SHARE", knob)
    index = generated_index(seed)
    rng = np.random.default_rng(1000 + seed)
    early = 0
    for _ in range(30):
        terms = [f"t{i}" for i in rng.choice(40, int(rng.integers(1, 9)), replace=False)]
        eligible = rng.random(ROWS) < rng.choice([1.0, 0.9, 0.3, 0.02])
        count = int(rng.choice([1, 10, 100]))
        # Half the queries as a requester: each term's idf rescaled by its own factor.
        scale = rng.uniform(0.3, 1.6, len(terms)).tolist() if rng.random() < 0.5 else None
        dense = index.score(terms, scale)
        everything = np.flatnonzero((dense > 0) & eligible)
        expected = top_candidates(everything, dense[everything], count)
        rows, scores = index.candidates(terms, count, eligible, scale)
        assert eligible[rows].all()
        np.testing.assert_array_equal(scores, dense[rows])  # bit-equal to the full scoring
        got = top_candidates(rows, scores, count)
        assert got.rows.tolist() == expected.rows.tolist()
        assert got.scores.tolist() == expected.scores.tolist()
        if expected.rows.size:  # rows left out score strictly lower than the last kept
            assert (dense[np.setdiff1d(everything, rows)] < expected.scores[-1]).all()
        early += rows.size < everything.size
    assert early  # some queries stopped before reading every posting


def test_sparse_and_dense_matches_agree_on_generated_postings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = generated_index(9)
    terms = ["t0", "t5", "t17", "t33"]
    for scale in (None, [0.5, 1.25, 0.9, 1.1]):  # the operator, then a requester's idf
        dense = index.score(terms, scale)
        for share in (0, 10**9):  # 0 forces the sparse sum, a huge share the dense one
            monkeypatch.setattr(serving.lexical, "DENSE_SHARE", share)
            rows, scores = index.matches(terms, scale)
            assert rows.tolist() == np.flatnonzero(dense).tolist()
            np.testing.assert_array_equal(scores, dense[rows])


def test_scores_of_some_rows_equal_a_full_scoring() -> None:
    index = generated_index(4)
    terms = ["t1", "t2", "t30"]
    rows = np.sort(np.random.default_rng(4).choice(ROWS, 500, replace=False))
    for scale in (None, [0.5, 1.25, 0.9]):
        np.testing.assert_array_equal(
            index.scores_of(terms, rows, scale), index.score(terms, scale)[rows]
        )


@NEEDS_C
@pytest.mark.parametrize("by_sums", [False, True])
def test_the_walk_and_the_sums_refuse_spans_and_rows_outside_their_arrays(by_sums: bool) -> None:
    walk = serving.lexical._bm25
    assert walk is not None
    # Term 0 holds rows 0, 3, 9 (scores 1, 2, 3); term 1 rows 3, 9 (1, 1).
    rows = np.array([0, 3, 9, 3, 9], dtype=np.int32)
    scores = np.array([1, 2, 3, 1, 1], dtype=np.float32)
    impact_rows = np.array([9, 3, 0, 3, 9], dtype=np.int32)
    impact_scores = np.array([3, 2, 1, 1, 1], dtype=np.float32)

    def best(spans: list[tuple[int, int]], eligible_rows: int) -> dict[int, float]:
        found, found_scores = walk.best_rows(
            rows,
            scores,
            impact_rows,
            impact_scores,
            np.array(spans, dtype=np.int64),
            np.ones(len(spans), dtype=np.float32),
            np.ones(eligible_rows, dtype=np.bool_),
            2,
            2,
            by_sums,
        )
        found_rows = np.frombuffer(found, np.int32).tolist()
        return dict(zip(found_rows, np.frombuffer(found_scores, np.float32).tolist(), strict=True))

    assert best([(0, 3), (3, 5)], 10) == {3: 3.0, 9: 4.0}
    assert best([(0, 3)], 10) == {3: 2.0, 9: 3.0}
    assert best([(0, 3), (3, 5)], 10) == best([(3, 5), (0, 3)], 10)
    for spans in ([(0, 6)], [(2, 2)], [(-1, 2)], []):
        with pytest.raises(ValueError, match="span"):
            best(spans, 10)
    for spans in ([(0, 3), (3, 5)], [(0, 3)]):
        with pytest.raises(ValueError, match="outside eligible"):
            best(spans, 9)  # row 9 has no eligibility byte


@NEEDS_C
def test_concurrent_sums_each_get_their_own_accumulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches on several threads at once (the C code runs without the GIL) take separate
    zeroed accumulators and give them back zeroed: every answer equals the full scoring."""
    monkeypatch.setattr(BM25Index, "_sums_cheaper", lambda *_: True)
    index = generated_index(3)
    rng = np.random.default_rng(7)
    asks = [[f"t{i}" for i in rng.choice(40, 4, replace=False)] for _ in range(64)]
    everything = np.ones(ROWS, dtype=bool)

    def best(terms: list[str]) -> list[int]:
        rows, scores = index.candidates(terms, 10, everything)
        return top_candidates(rows, scores, 10).rows.tolist()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(best, asks * 4))
    for terms, answer in zip(asks * 4, answers, strict=True):
        dense = index.score(terms)
        rows = np.flatnonzero(dense)
        assert answer == top_candidates(rows, dense[rows], 10).rows.tolist()


def test_queries_of_more_terms_than_the_c_code_takes_are_scored_in_numpy() -> None:
    index = generated_index(4, term_count=80)
    terms = [f"t{i}" for i in range(80)]
    everything = np.ones(ROWS, dtype=bool)
    dense = index.score(terms)
    rows, scores = index.candidates(terms, 20, everything)
    np.testing.assert_array_equal(scores, dense[rows])
    matching = np.flatnonzero(dense)
    expected = top_candidates(matching, dense[matching], 20)
    assert top_candidates(rows, scores, 20).rows.tolist() == expected.rows.tolist()
