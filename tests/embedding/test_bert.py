"""The NumPy BERT encoder reproduces sentence-transformers' vectors for the companion model."""

import json
from pathlib import Path

import numpy as np
import pytest

from slackquery.embedding.bert import BertSentenceEncoder
from slackquery.embedding.packaged import MINILM

# Vectors computed once with sentence-transformers on PyTorch (not installed here), for
# texts covering mrkdwn, code-mixed Hinglish, accents and CJK, and truncation at 256 tokens.
REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())


@pytest.fixture(scope="module")
def encoder() -> BertSentenceEncoder:
    return BertSentenceEncoder(MINILM.model_dir(), MINILM.max_tokens)


def test_encoder_reproduces_sentence_transformers(encoder: BertSentenceEncoder) -> None:
    vectors = encoder.encode(REFERENCE["texts"])
    assert vectors.shape == (len(REFERENCE["texts"]), MINILM.dimension)
    np.testing.assert_allclose(vectors, np.array(REFERENCE["vectors"]), atol=2e-5)


def test_a_vector_does_not_depend_on_its_batch(encoder: BertSentenceEncoder) -> None:
    # Bit for bit: a resumed embedding run batches differently and must store the same bytes.
    texts = REFERENCE["texts"]
    one_by_one = np.vstack([encoder.encode([text]) for text in texts])
    np.testing.assert_array_equal(encoder.encode(texts), one_by_one)
    np.testing.assert_array_equal(encoder.encode(texts[::-1])[::-1], one_by_one)


def test_no_texts_give_an_empty_matrix(encoder: BertSentenceEncoder) -> None:
    assert encoder.encode([]).shape == (0, MINILM.dimension)
