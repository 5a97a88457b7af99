"""The in-memory fast paths rank exactly like their plain reference versions."""

import numpy as np
import pytest

import serving.lexical
import serving.ranking
import serving.semantic
from serving.engine import SearchEngine
from serving.fusion import RERANKERS, fuse
from serving.models import SearchRequest
from serving.ranking import (
    PRESELECT_MIN_VALUES,
    ArmRanking,
    FusedHit,
    preselect,
    top_candidates,
    top_rows,
)
from serving.stages import RERANK_STAGES, boost_answer_cues, combine_scores
from slackquery.artifacts.documents import DISPLAY_COLUMNS


def reference_fuse(
    arms: dict[str, ArmRanking],
    weights: dict[str, float],
    *,
    rrf_k: float,
    thread_keys: np.ndarray,
    max_per_thread: int,
) -> tuple[list[FusedHit], list[int]]:
    """The plain-Python weighted RRF with a per-thread cap that `fuse` vectorises: the hits
    and the rows the cap left out."""
    fused: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    scores: dict[int, dict[str, float]] = {}
    for arm in sorted(arms):
        ranking = arms[arm]
        weight = float(weights.get(arm, 0.0))
        for position, (row, score) in enumerate(
            zip(ranking.rows.tolist(), ranking.scores.tolist(), strict=True), start=1
        ):
            fused[row] = fused.get(row, 0.0) + weight / (rrf_k + position)
            ranks.setdefault(row, {})[arm] = position
            scores.setdefault(row, {})[arm] = score
    per_thread: dict[int, int] = {}
    hits: list[FusedHit] = []
    left_out: list[int] = []
    for row in sorted(fused, key=lambda row: (-fused[row], row)):
        key = int(thread_keys[row])
        if per_thread.get(key, 0) >= max_per_thread:
            left_out.append(row)
            continue
        per_thread[key] = per_thread.get(key, 0) + 1
        hits.append(FusedHit(row, fused[row], ranks[row], scores[row]))
    return hits, left_out


@pytest.mark.parametrize("seed", range(20))
def test_fuse_equals_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    row_count = int(rng.integers(5, 400))
    thread_keys = rng.integers(0, max(2, row_count // 4), size=row_count)
    arms = {}
    for arm in ("lexical", "semantic", "context")[: int(rng.integers(1, 4))]:
        size = int(rng.integers(0, min(row_count, 120) + 1))
        rows = rng.choice(row_count, size=size, replace=False).astype(np.int64)
        arms[arm] = ArmRanking(rows, rng.random(size).astype(np.float32))
    weights = {"lexical": 1.8, "semantic": 0.5, "context": 0.65}
    knobs = {"rrf_k": 60.0, "thread_keys": thread_keys, "max_per_thread": int(rng.integers(1, 4))}
    hits, left_out = fuse(arms, weights, **knobs)
    assert (hits, left_out.tolist()) == reference_fuse(arms, weights, **knobs)


@pytest.mark.parametrize("seed", range(10))
def test_top_candidates_equals_top_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 5, size=300).astype(np.float32)  # many ties
    eligible = rng.random(300) < 0.6
    rows = np.flatnonzero(eligible)
    shuffled = rng.permutation(rows.size)
    expected = top_rows(scores, eligible, 25)
    got = top_candidates(rows[shuffled], scores[rows][shuffled], 25)
    assert got.rows.tolist() == expected.rows.tolist()
    assert got.scores.tolist() == expected.scores.tolist()


def reference_top(rows: np.ndarray, scores: np.ndarray, window: int) -> tuple[list, list]:
    """The `window` best rows by descending score, ties by row, from a full sort."""
    order = sorted(range(rows.size), key=lambda i: (-float(scores[i]), int(rows[i])))[:window]
    return rows[order].tolist(), scores[order].tolist()


@pytest.mark.parametrize(("seed", "levels"), [(1, 50), (2, 1000), (3, 10**6)])
def test_top_candidates_of_many_values_equals_a_full_sort(seed: int, levels: int) -> None:
    # Above PRESELECT_MIN_VALUES a sampled threshold cuts the values first; few levels
    # make many ties at the window's last score, which must all stay in the running.
    rng = np.random.default_rng(seed)
    count = 3 * PRESELECT_MIN_VALUES
    rows = rng.permutation(count * 2)[:count]
    scores = (rng.integers(0, levels, size=count) / levels).astype(np.float32)
    got = top_candidates(rows, scores, 100)
    assert (got.rows.tolist(), got.scores.tolist()) == reference_top(rows, scores, 100)


def test_preselect_keeps_every_value_at_least_the_countth_highest() -> None:
    rng = np.random.default_rng(4)
    values = rng.standard_normal(2 * PRESELECT_MIN_VALUES).astype(np.float32)
    kept = preselect(values, 400)
    assert kept is not None and 400 <= kept.size < values.size // 10
    assert np.all(np.diff(kept) > 0)
    cut = np.sort(values)[-400]
    assert set(np.flatnonzero(values >= cut)) <= set(kept.tolist())


def test_preselect_takes_everything_when_the_sample_misses_the_top() -> None:
    # The strided sample sees 32 high values; 8 more, just as high as needed, sit between
    # its points, so the sample's threshold would keep 32 of the 40 best.
    values = np.zeros(2 * PRESELECT_MIN_VALUES, dtype=np.float32)
    stride = values.size // serving.ranking._PRESELECT_SAMPLE
    values[: 32 * stride : stride] = 10.0
    values[1 : 8 * stride : stride] = 5.0
    assert preselect(values, 40) is None
    assert preselect(values[:1000], 10) is None  # too few values to be worth it


@pytest.mark.parametrize("dense_share", [0, 10**9])
def test_bm25_matches_equal_dense_scores(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch, dense_share: int
) -> None:
    # dense_share 0 forces the sparse sum, a huge one the dense accumulator.
    monkeypatch.setattr(serving.lexical, "DENSE_SHARE", dense_share)
    with engine.artifact() as artifact:
        vocabulary = sorted(artifact.bm25.term_ids)
        for terms in (["err"], ["err", "42", "deploy"], vocabulary[:7], vocabulary[-3:]):
            dense = artifact.bm25.score(terms)
            rows, scores = artifact.bm25.matches(terms)
            assert sorted(rows.tolist()) == np.flatnonzero(dense).tolist()
            assert np.array_equal(scores, dense[rows])


def test_display_rows_equal_duckdb(engine: SearchEngine) -> None:
    with engine.artifact() as artifact:
        cursor = artifact.cursor()
        try:
            expected = cursor.execute(
                f"select {', '.join(DISPLAY_COLUMNS)} from search_documents order by document_id"
            ).fetchall()
        finally:
            cursor.close()
        assert len(expected) == artifact.row_count
        for row, values in enumerate(expected):
            assert artifact.display_row(row) == dict(zip(DISPLAY_COLUMNS, values, strict=True))


@pytest.mark.parametrize("mode", ["lexical", "semantic", "hybrid"])
def test_filter_that_keeps_everything_ranks_like_no_filter(engine: SearchEngine, mode: str) -> None:
    # The unfiltered path skips the row mask; a filter passing every row takes the masked
    # path. Both must give the same ranking.
    everything = ["public", "private", "dm", "group_dm"]
    for query in ("ERR-42 deploy", "database connection problems", "why did the deploy fail"):
        plain = engine.search(SearchRequest(query=query, mode=mode, limit=50))  # type: ignore[arg-type]
        masked = engine.search(
            SearchRequest(query=query, mode=mode, limit=50, conversation_types=everything)  # type: ignore[arg-type]
        )
        assert [hit.model_dump() for hit in plain.results] == [
            hit.model_dump() for hit in masked.results
        ]


def test_fuse_with_shared_ranks() -> None:
    # Three rows share rank 1 of the context arm (one thread's messages): each gets w/(k+1).
    arms = {
        "context": ArmRanking(
            np.array([4, 5, 6, 9]), np.array([3.0, 3.0, 3.0, 1.0]), np.array([1, 1, 1, 2])
        ),
        "semantic": ArmRanking(np.array([6, 9]), np.array([0.9, 0.8])),
    }
    hits, _ = fuse(
        arms,
        {"context": 0.5, "semantic": 1.5},
        rrf_k=20,
        thread_keys=np.arange(10),
        max_per_thread=3,
    )
    fused = {hit.row: hit.fused_score for hit in hits}
    assert fused[6] == pytest.approx(0.5 / 21 + 1.5 / 21)
    assert fused[4] == fused[5] == pytest.approx(0.5 / 21)
    assert fused[9] == pytest.approx(0.5 / 22 + 1.5 / 22)
    assert [hit.row for hit in hits] == [6, 9, 4, 5]
    assert hits[0].ranks == {"context": 1, "semantic": 1}


def test_answer_cue_boost_reorders_near_ties_only() -> None:
    hits = [
        FusedHit(1, 0.100, {"semantic": 1}, {"semantic": 0.9}),
        FusedHit(2, 0.090, {"semantic": 2}, {"semantic": 0.8}),
        FusedHit(3, 0.050, {"semantic": 3}, {"semantic": 0.7}),
        FusedHit(4, 0.045, {"semantic": 4}, {"semantic": 0.6}),
    ]
    boosted = boost_answer_cues(hits, [False, True, False, True], 0.25)
    # 0.090 x 1.25 passes 0.100; 0.045 x 1.25 passes 0.050 but not 0.100.
    assert [hit.row for hit in boosted] == [2, 1, 4, 3]
    assert boosted[0].fused_score == pytest.approx(0.1125)
    assert [hit.answer_cue for hit in boosted] == [True, False, True, False]
    assert boosted[0].ranks == {"semantic": 2}
    # Equal boosted scores break ties on the row, like `fuse`.
    tied = boost_answer_cues(
        [FusedHit(7, 1.25, {}, {}), FusedHit(5, 1.0, {}, {})], [False, True], 0.25
    )
    assert [hit.row for hit in tied] == [5, 7]
    assert boost_answer_cues(hits, [True] * 4, 0.25)[0].row == 1  # all cued: order kept
    # Only the checked head is re-ranked; the tail keeps its order below it.
    head = boost_answer_cues(hits, [False, True], 0.25)
    assert [hit.row for hit in head] == [2, 1, 3, 4]
    assert not head[3].answer_cue


def test_score_rerank_keeps_the_gaps_rank_fusion_drops() -> None:
    # Fused order 1, 2, 3; BM25 puts row 3 far ahead, cosine barely prefers 1 over 3.
    hits = [
        FusedHit(1, 0.09, {"lexical": 2, "semantic": 1}, {"lexical": 2.0, "semantic": 0.80}),
        FusedHit(2, 0.08, {"lexical": 3, "semantic": 3}, {"lexical": 1.0, "semantic": 0.70}),
        FusedHit(3, 0.07, {"lexical": 1, "semantic": 2}, {"lexical": 9.0, "semantic": 0.78}),
    ]
    reranked = combine_scores(hits, {"lexical": 1.0, "semantic": 1.0})
    # Normalised: row 1 = 1/8 + 1, row 2 = 0 + 0, row 3 = 1 + 0.8.
    assert [hit.row for hit in reranked] == [3, 1, 2]
    assert [hit.fused_score for hit in reranked] == pytest.approx([1.8, 1.125, 0.0])
    assert reranked[0].ranks == hits[2].ranks and reranked[0].scores == hits[2].scores
    # An arm's weight scales its share; a hit an arm did not rank gets nothing from it.
    only = [FusedHit(4, 0.05, {"semantic": 1}, {"semantic": 0.5}), *hits]
    weighted = combine_scores(only, {"lexical": 0.0, "semantic": 2.0})
    assert [hit.row for hit in weighted] == [1, 3, 2, 4]
    # One hit per arm normalises to 1, and equal scores break ties on the row.
    tied = combine_scores(
        [FusedHit(9, 0.1, {"lexical": 1}, {"lexical": 3.0}), FusedHit(5, 0.1, {}, {})],
        {"lexical": 1.0},
    )
    assert [(hit.row, hit.fused_score) for hit in tied] == [(9, 1.0), (5, 0.0)]
    assert combine_scores([], {"lexical": 1.0}) == []


def test_every_reranker_name_has_a_stage() -> None:
    # The names live in serving.fusion (the config validates them), the stages beside the
    # other stages; a name without a stage would silently leave hits unranked.
    assert set(RERANKERS) == {"none", *RERANK_STAGES}


@pytest.mark.parametrize("share", [0.0, 0.01, 0.1, 0.5, 1.0])
def test_vector_scores_equal_the_plain_product(
    monkeypatch: pytest.MonkeyPatch, share: float
) -> None:
    # Small gather blocks, so a subset spans several of them and a partial last one.
    monkeypatch.setattr(serving.semantic, "_GATHER_BYTES", 16 * 24 * 4)
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((2000, 24)).astype(np.float32)
    query = rng.standard_normal(24).astype(np.float32)
    positions = np.sort(rng.choice(2000, int(2000 * share), replace=False))
    scores = serving.semantic.vector_scores(matrix, query, positions)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, matrix[positions] @ query, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        serving.semantic.vector_scores(matrix, query, None), matrix @ query, rtol=1e-5, atol=1e-5
    )
    # Several queries in one pass score like one pass each.
    queries = rng.standard_normal((3, 24)).astype(np.float32)
    for subset in (positions, None):
        many = serving.semantic.vector_scores_many(matrix, queries, subset)
        expected = [serving.semantic.vector_scores(matrix, one, subset) for one in queries]
        assert many.shape == (3, len(expected[0]))
        np.testing.assert_allclose(many, np.stack(expected), rtol=1e-5, atol=1e-5)
