"""`document_arrays`: the per-document arrays beside the artifact agree with its table.

Serving filters, groups threads and shows results from these maps, never from
`search_documents`, so the table's checks say nothing about what is served unless the
arrays match it: one row per document, ids strictly ascending and equal to the table's
in `document_id` order; per row, the kind flags, `ts_us`, `has_link`, `is_thread` and each
filter code (decoded through its vocabulary) equal the table's; thread keys equal exactly
when the rows share a thread; a thread context's members are the rows of its
`message_ids`; a reply's root row is the row of its `thread_root_id` (-1 for every other
row) and each root's replies are exactly the rows naming it, ascending; and, for an evenly
spread sample of rows, every display column equals the table's. Each batch is
`chunk_rows` rows of the table read in one streamed query; thread keys, context members
and reply roots are compared in that query, with the mapped arrays registered as DuckDB
views of NumPy columns, so no per-row Python runs over a million rows.
"""

import struct
from collections.abc import Iterator

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from expectations.suites import Artifact, chunks, document_rows, equals_metadata
from slackquery.artifacts import arrays, documents, packed
from slackquery.errors import SlackqueryError

TABLE = "document_arrays"
ID_COLUMNS = ["document_id"]
# Rows whose display columns are compared with the table's, spread evenly.
SAMPLE_ROWS = 1000
ROW_CHECKS = (
    "id_matches",
    "columns_match",
    "thread_key_matches",
    "context_matches",
    "root_matches",
    "display_matches",
)


def build_suite() -> gx.ExpectationSuite:
    """Expectations over one row per document (sampled display checks null elsewhere)."""
    suite = gx.ExpectationSuite(name=TABLE)
    suite.add_expectation(
        gxe.ExpectColumnValuesToBeInSet(
            column="arrays_readable",
            value_set=[True],
            description="the arrays folder beside the artifact opens, shapes agreeing",
        )
    )
    suite.add_expectation(equals_metadata("array_rows", "document_count", "document array rows"))
    for column, description in (
        ("ids_ascending", "document ids ascend strictly (lookups binary-search them)"),
        ("id_matches", "the row's document id is the table's in document_id order"),
        (
            "columns_match",
            "kind flags, ts_us, has_link, is_thread and filter codes equal the row's",
        ),
        ("thread_key_matches", "thread keys are equal exactly when rows share a thread"),
        ("context_matches", "a thread context's members are the rows of its message_ids"),
        ("root_matches", "a reply's root row is the row of its thread_root_id, else -1"),
        (
            "replies_invert_roots",
            "each root's replies are the rows naming it, ascending, in the root's channel",
        ),
        ("display_matches", "sampled rows' display columns equal the table's"),
    ):
        suite.add_expectation(
            gxe.ExpectColumnValuesToBeInSet(
                column=column, value_set=[True], description=description
            )
        )
    return suite


def _is_null(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _record(display: documents.DisplayRecords, row: int) -> dict[str, object] | None:
    """The row's display record, or None when its bytes do not decode (damaged)."""
    try:
        return display.row(row)
    except (UnicodeDecodeError, ValueError, struct.error):
        return None


def _same(mapped: object, table: object) -> bool:
    return mapped is None if _is_null(table) else mapped == table


# Views of the mapped arrays, registered on the validation connection for the batch query.
KEYS_VIEW = "document_array_thread_keys"
CONTEXT_VIEW = "document_array_context_rows"

# Per table row in `document_id` order: its thread group ("thread:<id>", or "row:<id>"
# outside threads) is one-to-one with its mapped thread key, and its context members
# (message_ids found in the table, in list order) equal the mapped ones.
BATCH_SQL = """
with documents as (
    select ranked.row_index, search_documents.*
    from search_documents join {rows} as ranked using (document_id)
),
groups as (
    select
        documents.row_index,
        keys.thread_key,
        coalesce('thread:' || nullif(documents.thread_id, ''), 'row:' || documents.document_id)
            as thread_group
    from documents left join {keys} as keys using (row_index)
),
keys_of_group as (
    select thread_group, count(distinct thread_key) as key_count
    from groups group by thread_group
),
groups_of_key as (
    select thread_key, count(distinct thread_group) as group_count
    from groups where thread_key is not null group by thread_key
),
listed as (
    select
        row_index,
        unnest(message_ids) as member_id,
        generate_subscripts(message_ids, 1) as position
    from documents where document_kind = 'thread_context'
),
expected_members as (
    select listed.row_index, list(members.row_index order by listed.position) as member_rows
    from listed join {rows} as members on members.document_id = listed.member_id
    group by listed.row_index
),
mapped_members as (
    select row_index, list(member_row order by position) as member_rows
    from {contexts} group by row_index
),
roots as (
    select documents.row_index, root_rows.row_index as root_row
    from documents join {rows} as root_rows on root_rows.document_id = documents.thread_root_id
    where documents.document_kind = 'message' and documents.is_thread_reply
        and documents.thread_root_id <> documents.document_id
)
select
    documents.row_index,
    {columns},
    groups.thread_key is not null
        and keys_of_group.key_count = 1
        and groups_of_key.group_count = 1 as thread_key_matches,
    coalesce(expected_members.member_rows, []::bigint[])
        = coalesce(mapped_members.member_rows, []::bigint[]) as context_matches,
    coalesce(roots.root_row, -1) as expected_root
from documents
join groups using (row_index)
join keys_of_group using (thread_group)
left join groups_of_key using (thread_key)
left join expected_members using (row_index)
left join mapped_members using (row_index)
left join roots using (row_index)
order by documents.row_index
"""


def _register_arrays(artifact: Artifact, mapped: documents.DocumentArrays) -> None:
    rows = len(mapped.arrays["thread_keys"])
    offsets = np.asarray(mapped.arrays["context.offsets"])
    owners = np.repeat(np.arange(rows, dtype=np.int64), np.diff(offsets))
    artifact.conn.register(
        KEYS_VIEW,
        pd.DataFrame(
            {
                "row_index": np.arange(rows, dtype=np.int64),
                "thread_key": np.asarray(mapped.arrays["thread_keys"]),
            }
        ),
    )
    artifact.conn.register(
        CONTEXT_VIEW,
        pd.DataFrame(
            {
                "row_index": owners,
                "position": np.arange(len(owners), dtype=np.int64) - offsets[owners],
                "member_row": np.asarray(mapped.arrays["context.rows"], dtype=np.int64),
            }
        ),
    )


class _Checker:
    """Per-row checks of the arrays against batches of the table, in `document_id` order."""

    def __init__(self, artifact: Artifact, mapped: documents.DocumentArrays):
        self.mapped = mapped
        self.ids = mapped.document_ids
        count = len(self.ids)
        sampled = np.linspace(0, count - 1, min(count, SAMPLE_ROWS)).astype(int)
        self.display_matches = self._display_matches(artifact, sampled.tolist())

    def frame(self, batch: pd.DataFrame) -> pd.DataFrame:
        """The check columns of one batch of table rows (`row_index` ascending)."""
        rows = batch["row_index"].to_numpy()
        inside = rows < len(self.ids)
        rows = np.where(inside, rows, 0)
        start = int(rows[0]) if len(rows) else 0
        return pd.DataFrame(
            {
                "document_id": batch["document_id"],
                "id_matches": inside & self.ids.equals(start, batch["document_id"].tolist()),
                "columns_match": inside & self._columns_match(rows, batch),
                "thread_key_matches": batch["thread_key_matches"].to_numpy(bool),
                "context_matches": batch["context_matches"].to_numpy(bool),
                "root_matches": inside
                & (self.mapped.arrays["reply_roots"][rows] == batch["expected_root"].to_numpy()),
                "display_matches": [self.display_matches.get(row) for row in rows.tolist()],
            }
        )

    def _columns_match(self, rows: np.ndarray, batch: pd.DataFrame) -> np.ndarray:
        per_row = self.mapped.arrays
        kinds = batch["document_kind"].to_numpy()
        same = (
            (per_row["is_message"][rows] == (kinds == "message"))
            & (per_row["is_context"][rows] == (kinds == "thread_context"))
            & (per_row["ts_us"][rows] == batch["ts_us"].to_numpy())
            & (per_row["has_link"][rows] == batch["has_link"].fillna(False).to_numpy(bool))
            & (per_row["is_thread"][rows] == (batch["thread_id"].fillna("").to_numpy() != ""))
        )
        for column in documents.CODED_COLUMNS:
            vocabulary = np.array(list(self.mapped.vocabulary(column)), dtype=object)
            decoded = vocabulary[self.mapped.codes(column)[rows]]
            same &= decoded == batch[column].fillna("").to_numpy(dtype=object)
        return same

    def _display_matches(self, artifact: Artifact, sampled: list[int]) -> dict[int, bool]:
        """Whether each sampled row's display columns equal the table's."""
        display = self.mapped.display()
        records = artifact.conn.execute(
            f"select ranked.row_index, {', '.join(f'd.{c}' for c in documents.DISPLAY_COLUMNS)} "
            f"from search_documents d join {document_rows(artifact.conn)} ranked "
            "using (document_id) where ranked.row_index in (select unnest($rows))",
            {"rows": sampled},
        ).fetchall()
        return {
            row: row < len(self.ids)
            and (record := _record(display, row)) is not None
            and all(
                _same(record[column], value)
                for column, value in zip(documents.DISPLAY_COLUMNS, values, strict=True)
            )
            for row, *values in records
        }


def _replies_invert_roots(mapped: documents.DocumentArrays) -> bool:
    """Whether `replies` lists, for each root row, exactly the rows whose `reply_roots` name
    it, ascending, none of them itself, each in its root's workspace and channel (what lets
    a root lend its words to the replies a requester may see: serving/arms.py)."""
    roots = np.asarray(mapped.arrays["reply_roots"])
    offsets = np.asarray(mapped.arrays["replies.offsets"])
    replies = np.asarray(mapped.arrays["replies.rows"])
    expected = np.flatnonzero(roots >= 0)
    if offsets[0] != 0 or offsets[-1] != replies.size or np.any(np.diff(offsets) < 0):
        return False
    owners = np.repeat(np.arange(roots.size), np.diff(offsets))
    same_place = all(
        np.array_equal(mapped.codes(column)[replies], mapped.codes(column)[owners])
        for column in ("workspace_id", "channel_id")
    )
    return bool(
        replies.size == expected.size
        and np.array_equal(np.sort(replies), expected)
        and np.array_equal(roots[replies], owners)
        and np.all((np.diff(replies) > 0) | (np.diff(owners) > 0))
        and not np.any(replies == owners)
        and same_place
    )


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Batches of `chunk_rows` documents, each carrying the whole-array facts."""
    try:
        mapped = arrays.open_arrays(artifact.arrays).documents
    except SlackqueryError:
        # Only the unreadable folder fails: every other check is null, so GX skips it.
        yield pd.DataFrame({column: [None] for column in ("document_id", *ROW_CHECKS)}).assign(
            arrays_readable=False, array_rows=None, ids_ascending=None, replies_invert_roots=None
        )
        return
    checker = _Checker(artifact, mapped)
    facts = {
        "arrays_readable": True,
        "array_rows": len(checker.ids),
        "ids_ascending": packed.is_strictly_ascending(checker.ids),
        "replies_invert_roots": _replies_invert_roots(mapped),
    }
    _register_arrays(artifact, mapped)
    columns = dict.fromkeys(
        ("document_id", "document_kind", *documents.CODED_COLUMNS, "ts_us", "has_link", "thread_id")
    )
    sql = BATCH_SQL.format(
        rows=document_rows(artifact.conn),
        keys=KEYS_VIEW,
        contexts=CONTEXT_VIEW,
        columns=", ".join(f"documents.{column}" for column in columns),
    )
    try:
        for batch in chunks(artifact, sql):
            yield checker.frame(batch).assign(**facts)
    finally:
        artifact.conn.unregister(KEYS_VIEW)
        artifact.conn.unregister(CONTEXT_VIEW)
