"""The query-embedding step: one model call for the uncached texts, cached per text."""

import sys
from collections.abc import Sequence

import numpy as np
import pytest

from serving.ranking import PRESELECT_MIN_VALUES
from serving.semantic import (
    RESCORE_DEPTH,
    QueryEmbedder,
    best_indices,
    dot_scores,
    vector_scores,
    vector_scores_many,
)
from slackquery.artifacts.arrays import Int8Codes
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
        scores = vector_scores(matrix, query, positions, codes)
        assert scores.shape == wanted.shape
        top = np.argsort(-wanted, kind="stable")[:100]
        assert set(np.argsort(-scores, kind="stable")[:100]) == set(top)
        # The re-scored best carry exact cosines, the rest estimates close to them.
        np.testing.assert_array_equal(scores[top], wanted[top])
        assert np.abs(scores - wanted).max() < 0.01
        assert np.count_nonzero(scores == wanted) >= RESCORE_DEPTH


def test_quantised_many_equals_one_at_a_time() -> None:
    matrix = clustered(7)
    codes = Int8Codes.of(matrix)
    queries = matrix[[3, 500, 4000]]
    for positions in (None, np.arange(100, 1900)):
        many = vector_scores_many(matrix, queries, positions, codes)
        for query, scores in zip(queries, many, strict=True):
            np.testing.assert_array_equal(scores, vector_scores(matrix, query, positions, codes))


def test_sets_within_the_rescore_depth_are_scored_exactly() -> None:
    matrix = clustered(3, count=RESCORE_DEPTH + 50)
    codes = Int8Codes.of(matrix)
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
    codes = Int8Codes.of(matrix)
    query = matrix[0]
    vector_scores(matrix, query, None, codes)  # warm-up: first-call caches
    before = sys.getrefcount(None)
    for _ in range(50):
        vector_scores(matrix, query, None, codes)
    assert abs(sys.getrefcount(None) - before) < 10


@pytest.mark.parametrize("count", [1, RESCORE_DEPTH, 5000])
def test_best_indices_of_many_scores_are_the_highest(count: int) -> None:
    # Past PRESELECT_MIN_VALUES the partition runs over a sampled threshold's survivors.
    scores = np.random.default_rng(count).standard_normal(3 * PRESELECT_MIN_VALUES)
    best = best_indices(scores.astype(np.float32), count)
    assert best is not None and best.size == count and np.all(np.diff(best) > 0)
    expected = np.sort(np.argsort(-scores.astype(np.float32), kind="stable")[:count])
    assert best.tolist() == expected.tolist()
