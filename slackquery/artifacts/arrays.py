"""The arrays beside an artifact: `search-<build_id>.arrays/`, one `.npy` per array.

Serving ranks by vectors in matrix form, scores BM25 from postings, filters by per-row
codes and shows display columns. Building those per process from DuckDB (copying a
million 768-d vectors and quantising them, reading the FTS tables into postings, decoding
a million strings per column) took most of a 34-53 s load and gigabytes of private memory
per process, paid again by every CLI search. The build writes them once instead, and
every reader maps them read-only (`np.load(mmap_mode="r")`): a load costs no copy, and
all serving processes share one copy in the page cache.

The vector arrays: position i is the i-th document that has a vector, in `document_id`
order:
- `vectors.npy`: float32 `(count, dimension)`, the vectors themselves, streamed from the
  state database; the artifact's `document_vectors` names their documents and sketches;
- `vector_codes.npy`, `vector_scales.npy`: their `Int8Codes` (int8 `(count, dimension)`,
  float32 `(dimension,)`), the copy the semantic scan re-estimates its best rows with;
- `vector_nibbles.npy`: uint8 `(count, nibble_width(dimension))`, the int8 codes rounded to
  int4 (`pack_nibbles`), half their bytes: the copy a full semantic pass reads;
- `vector_rows.npy`: int64 `(count,)`, the `search_documents` row (in `document_id` order)
  of each position, strictly ascending.
The BM25 postings (`postings.*`, `terms.*`) are described in `postings.py`, the
per-document arrays (ids, filter codes, flags, thread contexts, display columns) in
`documents.py`. The manifest records each file's sha256, dtype and shape; the GX suites
`vector_arrays`, `postings_arrays` and `document_arrays` check them against the DuckDB
tables.
"""

import errno
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from slackquery.artifacts import documents, files, postings
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.folders import PRIVATE_FOLDER_MODE

VECTOR_DTYPES = {
    "vectors": np.dtype(np.float32),
    "vector_codes": np.dtype(np.int8),
    "vector_scales": np.dtype(np.float32),
    "vector_nibbles": np.dtype(np.uint8),
    "vector_rows": np.dtype(np.int64),
}
# Array name -> dtype of every file of the folder; each is stored as `<name>.npy`.
DTYPES = {**VECTOR_DTYPES, **postings.DTYPES, **documents.DTYPES}
# Quantisation works in blocks of this many bytes of float32 rows, in one reused buffer:
# fresh multi-MiB temporaries per step measured 50x slower on the loaded host (huge-page
# faults; serving.semantic gathers rows in blocks of the same size for the same reason).
_BLOCK_BYTES = 3 * 1024 * 1024
_INT8_MAX = 127
_INT4_MAX = 7
# An int4 code's products in int8 units: `pack_nibbles` rounds `code * 7 / 127`.
NIBBLE_SCALE = _INT8_MAX / _INT4_MAX
# Dimensions per block of packed nibbles: 32 bytes, dimension k in the low nibble of byte
# k, dimension 32 + k in its high nibble (the layout serving/_int8dot.c unpacks).
_NIBBLE_BLOCK = 64
# Vectors stream out of DuckDB in chunks of this many DuckDB vectors (2,048 rows each;
# ~200 MB of 768-d floats), scattered into the mapped matrix: no sort, no object array.
VECTOR_FETCH_CHUNKS = 32


@dataclass(frozen=True)
class Int8Codes:
    """A vector matrix as int8 codes with one float32 scale per dimension.

    `codes[i, j] * scales[j]` approximates `matrix[i, j]`; a query is scaled by `scales`
    and quantised with one scale of its own, so `codes @ query_codes` times both scales
    estimates the cosine. Per-dimension scales keep each half of a concatenated model pair
    at full int8 resolution. `nibbles` round the codes to int4 (`pack_nibbles`): the same
    query codes times them, times `NIBBLE_SCALE`, estimate the same products at half the
    bytes read, coarsely enough (~8e-3 of a cosine) that only the best rows they pick are
    worth re-estimating with the codes.
    """

    codes: np.ndarray
    scales: np.ndarray
    nibbles: np.ndarray

    @classmethod
    def of(
        cls,
        matrix: np.ndarray,
        codes_out: np.ndarray | None = None,
        nibbles_out: np.ndarray | None = None,
    ) -> "Int8Codes":
        """Quantise `matrix` (rows of float32) one small block at a time, into `codes_out`
        and `nibbles_out` (arrays of their shapes, e.g. files being written) or new arrays."""
        count, dimension = matrix.shape
        block_rows = max(1, _BLOCK_BYTES // max(1, dimension * 4))
        buffer = np.empty((min(block_rows, count), dimension), np.float32)
        peak = np.zeros(dimension, dtype=np.float32)
        for start in range(0, count, block_rows):
            block = buffer[: len(matrix[start : start + block_rows])]
            np.abs(matrix[start : start + block_rows], out=block)
            np.maximum(peak, block.max(axis=0), out=peak)
        scales = np.where(peak > 0, peak / _INT8_MAX, 1.0).astype(np.float32)
        codes = np.empty(matrix.shape, np.int8) if codes_out is None else codes_out
        nibbles = (
            np.empty((count, nibble_width(dimension)), np.uint8)
            if nibbles_out is None
            else nibbles_out
        )
        for start in range(0, count, block_rows):
            block = buffer[: len(matrix[start : start + block_rows])]
            np.divide(matrix[start : start + block_rows], scales, out=block)
            np.rint(block, out=block)
            np.clip(block, -_INT8_MAX, _INT8_MAX, out=block)
            codes[start : start + block_rows] = block
            nibbles[start : start + block_rows] = pack_nibbles(codes[start : start + block_rows])
        return cls(codes, scales, nibbles)

    def quantise_queries(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Int8 query rows and the factor turning their integer dot products into cosines."""
        scaled = queries * self.scales
        peak = np.abs(scaled).max(axis=1)
        factor = np.where(peak > 0, peak / _INT8_MAX, 1.0).astype(np.float32)
        codes = np.rint(scaled / factor[:, None]).astype(np.int8)
        return codes, factor


def nibble_width(dimension: int) -> int:
    """Bytes per row of packed nibbles: whole blocks of 64 dimensions, the last padded."""
    return -(-dimension // _NIBBLE_BLOCK) * (_NIBBLE_BLOCK // 2)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Int8 code rows rounded to int4 (`code * 7 / 127`, -7..7), plus 8, two per byte.

    Unsigned 1..15 (8 for padding, a zero) is what the kernel's byte products take; it
    subtracts 8 x the query's byte sum again."""
    count, dimension = codes.shape
    padded = np.full((count, nibble_width(dimension) * 2), 8, dtype=np.uint8)
    rounded = np.rint(codes * np.float32(_INT4_MAX / _INT8_MAX))
    padded[:, :dimension] = (rounded + 8).astype(np.uint8)
    blocks = padded.reshape(count, -1, 2, _NIBBLE_BLOCK // 2)
    return (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(count, -1)


@dataclass(frozen=True)
class VectorArrays:
    """An artifact's vector arrays as read-only maps of their files."""

    vectors: np.ndarray
    codes: Int8Codes
    rows: np.ndarray


@dataclass(frozen=True)
class Arrays:
    """Every array of an artifact's folder, as read-only maps of their files."""

    vectors: VectorArrays
    postings: postings.Postings
    documents: documents.DocumentArrays


def array_file(folder: Path, name: str) -> Path:
    """The `.npy` file of one array in an arrays folder."""
    return folder / f"{name}.npy"


def _rows_of(row_of: dict[str, int], document_ids: list[str], what: str) -> np.ndarray:
    rows = np.array([row_of.get(doc, -1) for doc in document_ids], dtype=np.int64)
    if (rows < 0).any():
        raise SlackqueryError(f"{what} has vectors for documents not in the artifact")
    return rows


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reserve(fd: int, size: int) -> None:
    """Give the open file `size` bytes with disk blocks behind every one of them."""
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as error:  # a file system that cannot reserve (some FUSE, NFS)
            if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    # macOS, or no support: the file stays sparse, as `open_memmap` makes it
    os.ftruncate(fd, size)


def _create(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.memmap:
    """A new `.npy` file of `dtype` and `shape`, its whole size reserved on disk, mapped
    for writing.

    `open_memmap` alone makes the file sparse: on a full disk the first store into a page
    with no block behind it kills the process with SIGBUS. Reserved first, a full disk is
    an OSError (ENOSPC) naming the file here, which the build cleans up after.
    """
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": shape,
    }
    with path.open("wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.flush()
        try:
            _reserve(handle.fileno(), handle.tell() + dtype.itemsize * math.prod(shape))
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(path)) from error
    return np.lib.format.open_memmap(path, "r+")


def _save(folder: Path, named: dict[str, np.ndarray]) -> None:
    """Write each array to its file in `folder` (through `_create`, so a full disk is an
    OSError, not a short write)."""
    for name, array in named.items():
        if array.dtype != DTYPES[name]:
            raise SlackqueryError(f"array {name} is {array.dtype}, not {DTYPES[name]}")
        mapped = _create(array_file(folder, name), array.dtype, array.shape)
        mapped[...] = array
        mapped.flush()


def _write_vectors(
    conn: duckdb.DuckDBPyConnection,
    folder: Path,
    document_ids: list[str],
    dimension: int,
    source: duckdb.DuckDBPyConnection | None,
) -> None:
    """Write the vector matrices through file maps (`_create`), so a 3 GB matrix is
    never held in private memory. Positions follow the artifact's `document_vectors`;
    each `(document_id, embedding)` row of `source` fills its document's position."""
    row_of = {doc: row for row, doc in enumerate(document_ids)}
    vector_ids = conn.execute("select document_id from document_vectors").fetchnumpy()
    unsorted_rows = _rows_of(row_of, vector_ids["document_id"].tolist(), "document_vectors")
    count = len(unsorted_rows)
    rows = _create(array_file(folder, "vector_rows"), DTYPES["vector_rows"], (count,))
    rows[:] = np.sort(unsorted_rows)
    if np.any(rows[1:] == rows[:-1]):
        raise SlackqueryError("document_vectors has two vectors for one document")
    vectors = _create(array_file(folder, "vectors"), DTYPES["vectors"], (count, dimension))
    position_of = np.full(len(document_ids), -1, dtype=np.int64)
    position_of[rows] = np.arange(count)
    written = np.zeros(count, dtype=bool)
    while source is not None and not (chunk := source.fetch_df_chunk(VECTOR_FETCH_CHUNKS)).empty:
        positions = position_of[_rows_of(row_of, chunk["document_id"].tolist(), "the state")]
        if (positions < 0).any() or written[positions].any():
            raise SlackqueryError("the state's vectors are not the ones document_vectors names")
        vectors[positions] = np.stack(chunk["embedding"].to_numpy())
        written[positions] = True
    if not written.all():
        raise SlackqueryError("document_vectors names vectors the state does not hold")
    codes = _create(array_file(folder, "vector_codes"), DTYPES["vector_codes"], (count, dimension))
    nibbles = _create(
        array_file(folder, "vector_nibbles"),
        DTYPES["vector_nibbles"],
        (count, nibble_width(dimension)),
    )
    scales = Int8Codes.of(vectors, codes_out=codes, nibbles_out=nibbles).scales
    _save(folder, {"vector_scales": scales})
    for mapped in (rows, vectors, codes, nibbles):
        mapped.flush()


def write_arrays(
    artifact: Path,
    folder: Path,
    memory_limit: str,
    dimension: int,
    vectors: Callable[[], duckdb.DuckDBPyConnection | None],
) -> None:
    """Write the arrays of the DuckDB file `artifact` into the new folder `folder`.

    `vectors` starts the query of the vectors `document_vectors` names, as
    `(document_id, embedding)` rows (None: there are none); it runs last, after the
    display texts and postings are written and freed. Every file is fsynced; the caller
    renames the folder to its final name once the artifact has been validated.
    """
    folder.mkdir(mode=PRIVATE_FOLDER_MODE)
    conn = open_database(str(artifact), read_only=True)
    try:
        conn.execute("set memory_limit = ?", [memory_limit])
        conn.execute("set enable_progress_bar = false")
        per_document, document_ids = documents.document_arrays(conn)
        _save(folder, per_document)
        del per_document  # the display texts; the postings come next
        _save(folder, postings.Postings.from_fts(conn).arrays())
        _write_vectors(conn, folder, document_ids, dimension, vectors())
    finally:
        conn.close()
    for name in DTYPES:
        _fsync(array_file(folder, name))
    files.fsync_dir(folder)


def describe(folder: Path) -> dict[str, Any]:
    """What the manifest records of an arrays folder: its name and each file's sha256,
    dtype and shape."""
    described = {}
    for name in DTYPES:
        path = array_file(folder, name)
        mapped = np.load(path, mmap_mode="r")
        described[name] = {
            "file": path.name,
            "sha256": files.sha256_file(path),
            "dtype": str(mapped.dtype),
            "shape": list(mapped.shape),
        }
    return {"folder": folder.name, "files": described}


def verify_sealed(folder: Path, recorded: dict[str, Any] | None) -> None:
    """Raise unless `folder` holds exactly the arrays the manifest recorded (`recorded`).

    A `.npy` file's header holds its dtype and shape, so a matching sha256 covers them too.
    """
    if not recorded:
        raise SlackqueryError(
            f"the manifest records no arrays for {folder.name}: the artifact was built "
            "by an older version; build a new one"
        )
    entries = recorded.get("files") if isinstance(recorded, dict) else None
    if (
        not isinstance(entries, dict)
        or recorded.get("folder") != folder.name
        or set(entries) != set(DTYPES)
        or not all(isinstance(entry, dict) for entry in entries.values())
    ):
        raise SlackqueryError(f"the manifest names other arrays than {folder.name}")
    if not folder.is_dir() or folder.is_symlink():
        raise SlackqueryError(f"arrays {folder.name} are missing")
    expected = {array_file(folder, name).name for name in entries}
    extra = sorted(path.name for path in folder.iterdir() if path.name not in expected)
    if extra:
        raise SlackqueryError(
            f"arrays {folder.name} hold files the manifest does not record: {', '.join(extra)}"
        )
    for name, entry in entries.items():
        path = array_file(folder, name)
        if not path.is_file() or path.is_symlink():
            raise SlackqueryError(f"array {folder.name}/{path.name} is missing")
        files.require_checksum(path, entry.get("sha256"), f"{folder.name}/{path.name}")


def map_all(folder: Path) -> dict[str, np.ndarray]:
    """Every array of the folder, mapped read-only, of its registered dtype.

    The maps are plain ndarray views of `np.memmap`s: a memmap subclass runs Python code
    on every slice and carries its type into every result. Nothing may write into them.
    """
    if not folder.is_dir():
        raise SlackqueryError(f"arrays {folder} are missing: build and publish a new artifact")
    mapped = {}
    for name, dtype in DTYPES.items():
        try:
            array = np.load(array_file(folder, name), mmap_mode="r")
        except (OSError, ValueError) as error:
            raise SlackqueryError(f"array {folder.name}/{name}.npy: {error}") from error
        if array.dtype != dtype:
            raise SlackqueryError(f"array {folder.name}/{name}.npy is {array.dtype}")
        mapped[name] = np.asarray(array)
    return mapped


def _vector_arrays(mapped: dict[str, np.ndarray], folder: Path) -> VectorArrays:
    vectors, codes = mapped["vectors"], mapped["vector_codes"]
    count, dimension = vectors.shape
    if (
        codes.shape != vectors.shape
        or mapped["vector_nibbles"].shape != (count, nibble_width(dimension))
        or mapped["vector_scales"].shape != (dimension,)
        or mapped["vector_rows"].shape != (count,)
    ):
        raise SlackqueryError(f"vector arrays {folder.name} disagree on their shapes")
    return VectorArrays(
        vectors=vectors,
        codes=Int8Codes(codes, mapped["vector_scales"], mapped["vector_nibbles"]),
        rows=mapped["vector_rows"],
    )


def open_arrays(folder: Path) -> Arrays:
    """Map an artifact's arrays read-only, checking the shapes agree with each other."""
    mapped = map_all(folder)
    try:
        return Arrays(
            vectors=_vector_arrays(mapped, folder),
            postings=postings.Postings.of_arrays(mapped),
            documents=documents.DocumentArrays.of_arrays(mapped),
        )
    except ValueError as error:
        raise SlackqueryError(f"arrays {folder.name} disagree on their shapes: {error}") from error


def remove(folder: Path) -> None:
    """Delete an arrays folder and its files (retention, failed or dead builds)."""
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
