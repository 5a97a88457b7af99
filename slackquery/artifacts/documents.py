"""Per-document arrays: what serving needs of every `search_documents` row, precomputed.

Row i of every array is the i-th document in `document_id` order (the serving row):
- `document_ids` (packed, strictly ascending, so a reader finds a row by binary search);
- filter columns as int32 codes into a sorted packed vocabulary (`workspace_id`,
  `channel_id`, `author_id`, `conversation_type`; a null is the code of ""), `ts_us`,
  the flags `is_message`, `is_context`, `is_thread`, `has_link`, and `thread_keys`
  (one key per thread; rows outside threads get keys of their own);
- thread-context members as CSR: context row i's members are the rows
  `context.rows[context.offsets[i]:context.offsets[i + 1]]` (empty for other rows);
- the display columns, one record per row (`display.records`: `DisplayRecords`), so a
  result page is read from the maps, not from DuckDB, touching one place per hit rather
  than three arrays per column.
The GX suite `document_arrays` checks them against the table.
"""

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np

from slackquery.artifacts import packed, schema
from slackquery.errors import SlackqueryError

DISPLAY_COLUMNS = (
    "document_id",
    "source_message_id",
    "workspace_id",
    "workspace_name",
    "workspace_slug",
    "channel_id",
    "channel_name",
    "conversation_type",
    "author_id",
    "author_name",
    "ts",
    "ts_us",
    "thread_id",
    "thread_root_id",
    "is_thread_parent",
    "is_thread_reply",
    "text_display",
    "permalink",
)
# Filter column -> the name of its codes and its vocabulary.
CODED_COLUMNS = {
    "workspace_id": "workspaces",
    "channel_id": "channels",
    "author_id": "authors",
    "conversation_type": "types",
}
_SQL_TYPES = {column.name: column.type for column in schema.SEARCH_DOCUMENTS}
# document_id is `document_ids`; the other display columns are stored in the records.
_STORED_DISPLAY = DISPLAY_COLUMNS[1:]
# A record: each stored column's byte length (-1: null), then their bytes in that order:
# text as UTF-8, a BIGINT in decimal, a BOOLEAN as "1" or "0".
_RECORD_HEADER = struct.Struct(f"<{len(_STORED_DISPLAY)}i")
_DECODERS: dict[str, Callable[[memoryview], object]] = {
    "VARCHAR": lambda value: str(value, "utf-8"),
    "BIGINT": lambda value: int(bytes(value)),
    "BOOLEAN": lambda value: value == b"1",
}
_ENCODERS: dict[str, Callable[[object], bytes]] = {
    "VARCHAR": lambda value: str(value).encode("utf-8"),
    "BIGINT": lambda value: str(int(value)).encode("ascii"),  # type: ignore[call-overload]
    "BOOLEAN": lambda value: b"1" if value else b"0",
}


def _coded_dtypes(coded: str) -> dict[str, np.dtype]:
    return {f"{coded}.codes": np.dtype(np.int32), **packed.dtypes(f"{coded}.vocabulary")}


DTYPES: dict[str, np.dtype] = {
    **packed.dtypes("document_ids"),
    **{
        name: dtype
        for coded in CODED_COLUMNS.values()
        for name, dtype in _coded_dtypes(coded).items()
    },
    "ts_us": np.dtype(np.int64),
    "is_message": np.dtype(np.bool_),
    "is_context": np.dtype(np.bool_),
    "is_thread": np.dtype(np.bool_),
    "has_link": np.dtype(np.bool_),
    "thread_keys": np.dtype(np.int64),
    "context.offsets": np.dtype(np.int64),
    "context.rows": np.dtype(np.int64),
    "display.records.bytes": np.dtype(np.uint8),
    "display.records.offsets": np.dtype(np.int64),
}


def _codes(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Integer codes per row and the sorted vocabulary they index (None is "")."""
    as_text = np.array(["" if value is None else str(value) for value in values], dtype=object)
    vocabulary, codes = np.unique(as_text, return_inverse=True)
    return codes.astype(np.int32), [str(value) for value in vocabulary]


def _context_members(
    message_ids: np.ndarray, is_context: np.ndarray, row_of: dict[str, int]
) -> dict[str, np.ndarray]:
    """CSR of each thread context's member rows (members not in the artifact dropped)."""
    lengths = np.zeros(len(message_ids), dtype=np.int64)
    members: list[int] = []
    for row in np.flatnonzero(is_context).tolist():
        listed = message_ids[row]
        found = [row_of[doc] for doc in ([] if listed is None else list(listed)) if doc in row_of]
        lengths[row] = len(found)
        members.extend(found)
    offsets = np.zeros(len(message_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return {"context.offsets": offsets, "context.rows": np.array(members, dtype=np.int64)}


def _display_records(columns: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """`display.records`: per row, its stored display columns as one record."""
    encoded = []
    for column in _STORED_DISPLAY:
        encode = _ENCODERS[_SQL_TYPES[column]]
        values = columns[column].tolist()  # masked (null) entries become None
        encoded.append([None if value is None else encode(value) for value in values])
    records = [
        _RECORD_HEADER.pack(*(-1 if value is None else len(value) for value in fields))
        + b"".join(value for value in fields if value is not None)
        for fields in zip(*encoded, strict=True)
    ]
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, records), np.int64, rows), out=offsets[1:])
    return {
        "display.records.bytes": np.frombuffer(b"".join(records), dtype=np.uint8),
        "display.records.offsets": offsets,
    }


def document_arrays(conn: duckdb.DuckDBPyConnection) -> tuple[dict[str, np.ndarray], list[str]]:
    """The per-document arrays of an artifact (names as in `DTYPES`) and its document ids."""
    selected = dict.fromkeys(
        ("document_kind", *CODED_COLUMNS, "thread_id", "message_ids", "has_link", *DISPLAY_COLUMNS)
    )
    columns = conn.execute(
        f"select {', '.join(selected)} from search_documents order by document_id"
    ).fetchnumpy()
    document_ids = columns["document_id"].tolist()
    if not packed.is_strictly_ascending(document_ids):
        raise SlackqueryError("search_documents ids do not ascend in code point order")
    kinds = columns["document_kind"]
    result = {
        **packed.pack("document_ids", document_ids),
        "ts_us": np.asarray(columns["ts_us"], dtype=np.int64),
        "is_message": np.asarray(kinds == "message", dtype=bool),
        "is_context": np.asarray(kinds == "thread_context", dtype=bool),
        "has_link": np.asarray(columns["has_link"], dtype=bool),
    }
    for column, coded in CODED_COLUMNS.items():
        codes, vocabulary = _codes(columns[column])
        result |= {f"{coded}.codes": codes, **packed.pack(f"{coded}.vocabulary", vocabulary)}
    thread_codes, _ = _codes(columns["thread_id"])
    threads = columns["thread_id"].tolist()
    result["is_thread"] = np.fromiter((bool(thread) for thread in threads), bool, len(threads))
    # Rows outside threads get a key of their own so the per-thread cap ignores them.
    result["thread_keys"] = np.where(
        result["is_thread"],
        thread_codes,
        thread_codes.max(initial=0) + 1 + np.arange(len(document_ids)),
    ).astype(np.int64)
    row_of = {doc: row for row, doc in enumerate(document_ids)}
    result |= _context_members(columns["message_ids"], result["is_context"], row_of)
    result |= _display_records(columns, len(document_ids))
    return result, document_ids


class DisplayRecords:
    """The display columns of every row, read from its record (`_display_records`)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], document_ids: Sequence[str]):
        # Memoryviews: indexing one gives a Python int or a slice directly (see PackedStrings).
        self._data = memoryview(arrays["display.records.bytes"])
        self._offsets = memoryview(arrays["display.records.offsets"])
        self._document_ids = document_ids
        self._decoders = [_DECODERS[_SQL_TYPES[column]] for column in _STORED_DISPLAY]

    def row(self, row: int) -> dict[str, object]:
        """`DISPLAY_COLUMNS` of one row, None where null."""
        start = self._offsets[row]
        lengths = _RECORD_HEADER.unpack_from(self._data, start)
        position = start + _RECORD_HEADER.size
        values: dict[str, object] = {"document_id": self._document_ids[row]}
        for column, length, decode in zip(_STORED_DISPLAY, lengths, self._decoders, strict=True):
            if length < 0:
                values[column] = None
                continue
            values[column] = decode(self._data[position : position + length])
            position += length
        return values


def _expected_length(name: str, rows: int) -> int | None:
    """Entries the array `name` has for `rows` documents (None: any number)."""
    if name.endswith(".bytes") or ".vocabulary." in name or name == "context.rows":
        return None
    return rows + 1 if name.endswith(".offsets") else rows


@dataclass(frozen=True)
class DocumentArrays:
    """The per-document arrays of an artifact, as read-only maps."""

    arrays: Mapping[str, np.ndarray]

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "DocumentArrays":
        """The per-document arrays among `arrays`; ValueError unless their lengths agree."""
        rows = len(arrays["document_ids.nulls"])
        for name in DTYPES:
            expected = _expected_length(name, rows)
            if expected is not None and len(arrays[name]) != expected:
                raise ValueError(f"{name} has {len(arrays[name])} entries for {rows} documents")
        return cls({name: arrays[name] for name in DTYPES})

    @property
    def document_ids(self) -> packed.PackedStrings:
        """Document id of each row."""
        return packed.PackedStrings(self.arrays, "document_ids")

    def vocabulary(self, column: str) -> packed.SortedKeys:
        """Value -> code of a coded filter column (`CODED_COLUMNS`)."""
        name = CODED_COLUMNS[column]
        return packed.SortedKeys(packed.PackedStrings(self.arrays, f"{name}.vocabulary"))

    def codes(self, column: str) -> np.ndarray:
        """Per-row codes of a coded filter column."""
        return self.arrays[f"{CODED_COLUMNS[column]}.codes"]

    def display(self) -> DisplayRecords:
        """The display columns of each row (`DisplayRecords.row`)."""
        return DisplayRecords(self.arrays, self.document_ids)

    def context_members(self, row: int) -> np.ndarray:
        """Member rows of a thread-context row (empty for other rows)."""
        offsets = self.arrays["context.offsets"]
        return self.arrays["context.rows"][offsets[row] : offsets[row + 1]]
