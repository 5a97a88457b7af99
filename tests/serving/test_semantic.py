"""The query-embedding step: one model call for the uncached texts, cached per text."""

from collections.abc import Sequence

import numpy as np
import pytest

from serving.semantic import QueryEmbedder
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
