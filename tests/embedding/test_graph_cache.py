"""Built ONNX graphs kept between processes: read back only when verified, rebuilt else."""

from pathlib import Path

import numpy as np
import pytest

from slackquery.embedding import onnx_bert
from slackquery.embedding.graph_cache import cached_graph
from slackquery.embedding.packaged import MINILM, _companion_encoder, _ort_main

TEXTS = ["deploy failed on 28P01, password rejected", "wie geht's? 数据库 连接 超时", ""]


class Builder:
    """A graph builder that counts its calls."""

    def __init__(self, graph: bytes = b"graph bytes"):
        self.graph, self.calls = graph, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.graph


def test_a_graph_is_built_once_then_read_back(tmp_path: Path) -> None:
    build = Builder()
    assert cached_graph(tmp_path, ("sha", "int8"), build) == build.graph
    assert cached_graph(tmp_path, ("sha", "int8"), build) == build.graph
    assert build.calls == 1
    other = Builder(b"another graph")
    assert cached_graph(tmp_path, ("sha", "float"), other) == other.graph  # another key


def test_a_damaged_or_unverified_graph_is_rebuilt(tmp_path: Path) -> None:
    build = Builder()
    cached_graph(tmp_path, ("sha",), build)
    (graph_file,) = tmp_path.glob("*.onnx")
    graph_file.write_bytes(b"graph bytez")  # one byte changed
    assert cached_graph(tmp_path, ("sha",), build) == build.graph
    assert build.calls == 2 and graph_file.read_bytes() == build.graph  # rewritten
    graph_file.with_suffix(".sha256").unlink()
    assert cached_graph(tmp_path, ("sha",), build) == build.graph
    assert build.calls == 3


def test_a_folder_that_cannot_be_written_costs_only_the_rebuild(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    build = Builder()
    for _ in range(2):
        assert cached_graph(blocked / "models", ("sha",), build) == build.graph
    assert build.calls == 2
    assert cached_graph(None, ("sha",), build) == build.graph and build.calls == 3


def test_cached_graphs_give_the_vectors_of_built_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Uncached loads (`__wrapped__`): the first builds and stores both graphs, the second
    # must read them back, so building is made to fail for it.
    engine = "onnxruntime-int8"
    built_main = _ort_main.__wrapped__("original", "e5-small-q4.bin", engine, tmp_path)
    built_companion = _companion_encoder.__wrapped__(MINILM, engine, tmp_path)
    assert len(list(tmp_path.glob("*.onnx"))) == 2

    def no_building(_weights: object) -> bytes:
        raise AssertionError("a cached graph was built again")

    monkeypatch.setattr(onnx_bert, "build_graph", no_building)
    read_main = _ort_main.__wrapped__("original", "e5-small-q4.bin", engine, tmp_path)
    read_companion = _companion_encoder.__wrapped__(MINILM, engine, tmp_path)
    for mode in ("query", "passage"):
        np.testing.assert_array_equal(read_main[mode](TEXTS), built_main[mode](TEXTS))
    np.testing.assert_array_equal(read_companion(TEXTS), built_companion(TEXTS))
