"""A BERT sentence encoder in NumPy: the forward pass of a sentence-transformers model.

Why NumPy: the companion model (all-MiniLM-L6-v2, 6 layers, 384 wide) is small enough that
BLAS matrix products run it at a useful speed on a CPU, and this keeps PyTorch (gigabytes)
out of the install. It reads the model's own `model.safetensors` and `tokenizer.json`, and
reproduces sentence-transformers' output (mean pooling over real tokens, L2-normalised);
tests/embedding/test_bert.py pins that against reference vectors.
"""

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from scipy.special import erf
from tokenizers import Tokenizer


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact (erf) GELU, not the tanh approximation."""
    return 0.5 * x * (1.0 + erf(x * np.float32(1 / np.sqrt(2.0))))


class BertSentenceEncoder:
    """Encode texts with a BERT checkpoint: tokenizer.json + model.safetensors + config.json.

    Texts run one at a time, never padded into a batch: a text's vector then does not
    depend on which texts it was sent with (batched BLAS products round differently by
    shape, so a resumed embedding run would store slightly different bytes), and on this
    model it is as fast (67 texts/s alone against 63 in padded batches of 32, 2 cores).
    One lock serialises calls because BLAS already uses every core.
    """

    def __init__(self, model_dir: Path, max_tokens: int):
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.dimension = int(config["hidden_size"])
        self._heads = int(config["num_attention_heads"])
        self._layers = int(config["num_hidden_layers"])
        self._eps = float(config["layer_norm_eps"])
        weights = load_file(str(model_dir / "model.safetensors"))
        self._w = {
            name: value.astype(np.float32)
            for name, value in weights.items()
            if value.dtype != np.int64
        }
        # Linear layers store (out, in); transpose once so every product is x @ W.
        for name in list(self._w):
            if name.endswith(".weight") and self._w[name].ndim == 2 and "embeddings" not in name:
                self._w[name] = np.ascontiguousarray(self._w[name].T)
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.no_padding()
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, dimension) L2-normalised sentence vectors, in input order."""
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        with self._lock:
            for row, encoding in enumerate(self._tokenizer.encode_batch(list(texts))):
                vectors[row] = self._forward(encoding.ids)
        return vectors

    def _forward(self, ids: list[int]) -> np.ndarray:
        """One sequence through embeddings, every layer and mean pooling."""
        w = self._w
        length, width = len(ids), self.dimension
        head = width // self._heads
        scale = np.float32(1.0 / np.sqrt(head))
        hidden = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        hidden = _layer_norm(
            hidden, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self._eps
        )
        for layer in range(self._layers):
            p = f"encoder.layer.{layer}."

            def project(x: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return x @ w[f"{p}{name}.weight"] + w[f"{p}{name}.bias"]

            def split(x: np.ndarray) -> np.ndarray:
                return x.reshape(length, self._heads, head).transpose(1, 0, 2)

            query = split(project(hidden, "attention.self.query"))
            key = split(project(hidden, "attention.self.key"))
            value = split(project(hidden, "attention.self.value"))
            scores = query @ key.transpose(0, 2, 1) * scale
            scores -= scores.max(axis=-1, keepdims=True)
            attention = np.exp(scores)
            attention /= attention.sum(axis=-1, keepdims=True)
            context = (attention @ value).transpose(1, 0, 2).reshape(length, width)
            hidden = _layer_norm(
                project(context, "attention.output.dense") + hidden,
                w[f"{p}attention.output.LayerNorm.weight"],
                w[f"{p}attention.output.LayerNorm.bias"],
                self._eps,
            )
            inner = _gelu(project(hidden, "intermediate.dense"))
            hidden = _layer_norm(
                project(inner, "output.dense") + hidden,
                w[f"{p}output.LayerNorm.weight"],
                w[f"{p}output.LayerNorm.bias"],
                self._eps,
            )
        pooled = hidden.mean(axis=0)
        return pooled / np.linalg.norm(pooled)
