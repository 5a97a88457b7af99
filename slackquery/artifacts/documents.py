"""Per-document arrays: what serving needs of every `search_documents` row, precomputed.

Row i of every array is the i-th document in `document_id` order (the serving row):
- `document_ids` (packed, strictly ascending, so a reader finds a row by binary search);
- filter columns as int32 codes into a sorted packed vocabulary (`workspace_id`,
  `channel_id`, `author_id`, `conversation_type`; a null is the code of ""), `ts_us`,
  the flags `is_message`, `is_context`, `is_thread`, `has_link`, and `thread_keys`
  (one key per thread; rows outside threads get keys of their own);
- thread-context members as CSR: context row i's members are the rows
  `context.rows[context.offsets[i]:context.offsets[i + 1]]` (empty for other rows);
- `reply_roots`: for a reply, the row of the message its thread started with (-1 for
  every other row, and for a reply whose root is not in the artifact or was never
  exported, whose `thread_root_id` is then its own id), and its inverse as
  CSR: root row i's replies are `replies.rows[replies.offsets[i]:replies.offsets[i + 1]]`;
- the display columns, one record per row (`display.records`: `DisplayRecords`), so a
  result page is read from the maps, not from DuckDB, touching one place per hit rather
  than three arrays per column.
The GX suite `document_arrays` checks them against the table.
"""

import itertools
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
    "files",
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
# text (JSON too) as UTF-8, a BIGINT in decimal, a BOOLEAN as "1" or "0".
_RECORD_HEADER = struct.Struct(f"<{len(_STORED_DISPLAY)}i")
_DECODERS: dict[str, Callable[[memoryview], object]] = {
    "VARCHAR": lambda value: str(value, "utf-8"),
    "JSON": lambda value: str(value, "utf-8"),  # as DuckDB returns JSON: its text
    "BIGINT": lambda value: int(bytes(value)),
    "BOOLEAN": lambda value: value == b"1",
}
# The same encodings in SQL: DuckDB writes the records' bytes (a BIGINT cast to VARCHAR is
# its decimal), 4x faster than encoding 17 columns of every row in Python.
_ENCODINGS_SQL: dict[str, str] = {
    "VARCHAR": "encode({})",
    "JSON": "encode(cast({} as varchar))",
    "BIGINT": "encode(cast({} as varchar))",
    "BOOLEAN": "encode(case when {} then '1' else '0' end)",
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
    "reply_roots": np.dtype(np.int64),
    "context.offsets": np.dtype(np.int64),
    "context.rows": np.dtype(np.int64),
    "replies.offsets": np.dtype(np.int64),
    "replies.rows": np.dtype(np.int64),
    "display.records.bytes": np.dtype(np.uint8),
    "display.records.offsets": np.dtype(np.int64),
}


def _coded_value(column: str) -> str:
    """The value a row's code stands for: the column's, with None as ""."""
    return f"coalesce({column}, '')"


def _code_sql(column: str) -> str:
    """A row's code: the rank of its value in the sorted vocabulary (`_vocabulary`)."""
    return f"(dense_rank() over (order by {_coded_value(column)}) - 1)::integer"


def _vocabulary(conn: duckdb.DuckDBPyConnection, column: str) -> list[str]:
    """The column's distinct coded values in code point order."""
    rows = conn.execute(
        f"select distinct {_coded_value(column)} as value from search_documents order by value"
    ).fetchall()
    return [row[0] for row in rows]


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


def _replies(reply_roots: np.ndarray) -> dict[str, np.ndarray]:
    """`reply_roots` and its inverse: each root row's replies as CSR, ascending."""
    replies = np.flatnonzero(reply_roots >= 0)
    by_root = replies[np.argsort(reply_roots[replies], kind="stable")]
    offsets = np.zeros(len(reply_roots) + 1, dtype=np.int64)
    np.cumsum(np.bincount(reply_roots[replies], minlength=len(reply_roots)), out=offsets[1:])
    return {"reply_roots": reply_roots, "replies.offsets": offsets, "replies.rows": by_root}


def _display_records(conn: duckdb.DuckDBPyConnection, rows: int) -> dict[str, np.ndarray]:
    """`display.records`: per row, its stored display columns as one record."""
    encoded = [_ENCODINGS_SQL[_SQL_TYPES[column]].format(column) for column in _STORED_DISPLAY]
    lengths_sql = ", ".join(
        f"coalesce(octet_length({value}), -1)::integer as length_{index}"
        for index, value in enumerate(encoded)
    )
    values_sql = " || ".join(f"coalesce({value}, ''::blob)" for value in encoded)
    columns = conn.execute(
        f"select {lengths_sql}, {values_sql} as values_bytes "
        "from search_documents order by document_id"
    ).fetchnumpy()
    values = columns["values_bytes"].tolist()
    if len(values) != rows:
        raise SlackqueryError("search_documents changed while its arrays were written")
    width = _RECORD_HEADER.size
    headers = np.column_stack(
        [np.asarray(columns[f"length_{index}"], dtype="<i4") for index in range(len(encoded))]
    ).tobytes()
    header_of = (headers[row * width : (row + 1) * width] for row in range(rows))
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, rows) + width, out=offsets[1:])
    records = b"".join(itertools.chain.from_iterable(zip(header_of, values, strict=True)))
    return {
        "display.records.bytes": np.frombuffer(records, dtype=np.uint8),
        "display.records.offsets": offsets,
    }


def document_arrays(conn: duckdb.DuckDBPyConnection) -> tuple[dict[str, np.ndarray], list[str]]:
    """The per-document arrays of an artifact (names as in `DTYPES`) and its document ids."""
    # Codes are ranks computed by DuckDB: np.unique over 1M Python strings took ~1 s a column.
    coded = {column: _code_sql(column) for column in (*CODED_COLUMNS, "thread_id")}
    columns = conn.execute(
        f"""
        with roots as (
            select thread_root_id, root_row
            from (
                select document_id as thread_root_id, document_kind,
                    row_number() over (order by document_id) - 1 as root_row
                from search_documents
            )
            where document_kind = 'message'
        )
        select document_id, document_kind, ts_us, message_ids, has_link,
            {_coded_value("thread_id")} <> '' as is_thread,
            {", ".join(f"{code} as {column}_code" for column, code in coded.items())},
            case when document_kind = 'message' and is_thread_reply
                    and thread_root_id <> document_id
                then coalesce(roots.root_row, -1) else -1 end as reply_root
        from search_documents left join roots using (thread_root_id)
        order by document_id
        """
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
        "is_thread": np.asarray(columns["is_thread"], dtype=bool),
        "has_link": np.asarray(columns["has_link"], dtype=bool),
    }
    for column, coded_name in CODED_COLUMNS.items():
        result |= {
            f"{coded_name}.codes": np.asarray(columns[f"{column}_code"], dtype=np.int32),
            **packed.pack(f"{coded_name}.vocabulary", _vocabulary(conn, column)),
        }
    thread_codes = np.asarray(columns["thread_id_code"], dtype=np.int64)
    # Rows outside threads get a key of their own so the per-thread cap ignores them.
    result["thread_keys"] = np.where(
        result["is_thread"],
        thread_codes,
        thread_codes.max(initial=0) + 1 + np.arange(len(document_ids)),
    ).astype(np.int64)
    result |= _replies(np.asarray(columns["reply_root"], dtype=np.int64))
    row_of = {doc: row for row, doc in enumerate(document_ids)}
    result |= _context_members(columns["message_ids"], result["is_context"], row_of)
    result |= _display_records(conn, len(document_ids))
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
        """`DISPLAY_COLUMNS` of one row, None where null; ValueError when the record's
        lengths do not add up to its extent (damaged bytes, which decode as anything)."""
        start = self._offsets[row]
        lengths = _RECORD_HEADER.unpack_from(self._data, start)
        position = start + _RECORD_HEADER.size
        values: dict[str, object] = {"document_id": self._document_ids[row]}
        for column, length, decode in zip(_STORED_DISPLAY, lengths, self._decoders, strict=True):
            if length == -1:
                values[column] = None
                continue
            if length < 0:
                raise ValueError(f"the display record of row {row} has a length of {length}")
            values[column] = decode(self._data[position : position + length])
            position += length
        if position != self._offsets[row + 1]:
            raise ValueError(f"the display record of row {row} does not span its bytes")
        return values


# Arrays of any length: the members that CSR offsets index.
CSR_MEMBERS = ("context.rows", "replies.rows")


def _expected_length(name: str, rows: int) -> int | None:
    """Entries the array `name` has for `rows` documents (None: any number)."""
    if name.endswith(".bytes") or ".vocabulary." in name or name in CSR_MEMBERS:
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

    def replies_of(self, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The replies of these root rows, and for each reply its root's index in `roots`."""
        offsets = self.arrays["replies.offsets"]
        starts, counts = offsets[roots], offsets[roots + 1] - offsets[roots]
        owners = np.repeat(np.arange(roots.size), counts)
        within = np.arange(owners.size) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.arrays["replies.rows"][starts[owners] + within], owners

    def context_members(self, row: int) -> np.ndarray:
        """Member rows of a thread-context row (empty for other rows)."""
        offsets = self.arrays["context.offsets"]
        return self.arrays["context.rows"][offsets[row] : offsets[row + 1]]
