"""`document_arrays`: the per-document arrays beside the artifact agree with its table.

Serving filters, groups threads and shows results from these maps, never from
`search_documents`, so the table's checks say nothing about what is served unless the
arrays match it: one row per document, ids strictly ascending and equal to the table's
in `document_id` order; per row, the kind flags, `ts_us`, `has_link`, `is_thread` and each
filter code (decoded through its vocabulary) equal the table's; thread keys equal exactly
when the rows share a thread; a thread context's members are the rows of its
`message_ids`; and, for an evenly spread sample of rows, every display column equals the
table's. Each batch is `chunk_rows` rows of the table read in one streamed query.
"""

from collections.abc import Iterator
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe
import numpy as np
import pandas as pd

from expectations.suites import Artifact, chunks, equals_metadata
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


def _same(mapped: object, table: object) -> bool:
    return mapped is None if _is_null(table) else mapped == table


class _Checker:
    """Per-row checks of the arrays against batches of the table, in `document_id` order.

    Thread keys are checked one-to-one with threads (a row outside threads is its own
    group) over every batch so far, so two threads sharing a key fail wherever they meet.
    """

    def __init__(self, mapped: documents.DocumentArrays):
        self.mapped = mapped
        self.ids = mapped.document_ids
        # A dict, not a binary search: validation looks up every context member.
        self.row_of = {doc: row for row, doc in enumerate(self.ids)}
        self.display = mapped.display()
        count = len(self.ids)
        self.sampled = set(np.linspace(0, count - 1, min(count, SAMPLE_ROWS)).astype(int).tolist())
        self.key_of: dict[tuple[str, str], int] = {}
        self.group_of: dict[int, tuple[str, str]] = {}

    def frame(self, start: int, batch: pd.DataFrame) -> pd.DataFrame:
        """The check columns of the batch of table rows starting at row `start`."""
        rows = np.arange(start, start + len(batch))
        inside = rows < len(self.ids)
        rows = np.where(inside, rows, 0).tolist()
        # Plain lists per column: a per-row record dict cost most of the suite's time.
        ids, kinds, listed = (
            batch[column].tolist() for column in ("document_id", "document_kind", "message_ids")
        )
        threads = batch["thread_id"].fillna("").tolist()
        keys = self.mapped.arrays["thread_keys"][rows].tolist()
        return pd.DataFrame(
            {
                "document_id": batch["document_id"],
                "id_matches": inside
                & np.array([self.ids[row] == doc for row, doc in zip(rows, ids, strict=True)]),
                "columns_match": inside & self._columns_match(rows, batch),
                "thread_key_matches": [
                    self._thread_key_matches(("thread", thread) if thread else ("row", doc), key)
                    for thread, doc, key in zip(threads, ids, keys, strict=True)
                ],
                "context_matches": [
                    self._context_matches(row, kind == "thread_context", members)
                    for row, kind, members in zip(rows, kinds, listed, strict=True)
                ],
                "display_matches": self._display_matches(rows, batch),
            }
        )

    def _columns_match(self, rows: list[int], batch: pd.DataFrame) -> np.ndarray:
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

    def _thread_key_matches(self, group: tuple[str, str], key: int) -> bool:
        return (
            self.key_of.setdefault(group, key) == key
            and self.group_of.setdefault(key, group) == group
        )

    def _context_matches(self, row: int, is_context: bool, listed: Any) -> bool:
        expected = []
        if is_context and listed is not None:
            members = [self.row_of.get(doc) for doc in listed]
            expected = [member for member in members if member is not None]
        return self.mapped.context_members(row).tolist() == expected

    def _display_matches(self, rows: list[int], batch: pd.DataFrame) -> list[bool | None]:
        checks: list[bool | None] = [None] * len(rows)
        for index, row in enumerate(rows):
            if row in self.sampled:
                record = batch.iloc[index]
                checks[index] = all(
                    _same(column[row], record[name])
                    for name, column in zip(documents.DISPLAY_COLUMNS, self.display, strict=True)
                )
        return checks


def check_frames(artifact: Artifact) -> Iterator[pd.DataFrame]:
    """Batches of `chunk_rows` documents, each carrying the whole-array facts."""
    try:
        mapped = arrays.open_arrays(artifact.arrays).documents
    except SlackqueryError:
        # Only the unreadable folder fails: every other check is null, so GX skips it.
        yield pd.DataFrame({column: [None] for column in ("document_id", *ROW_CHECKS)}).assign(
            arrays_readable=False, array_rows=None, ids_ascending=None
        )
        return
    checker = _Checker(mapped)
    facts = {
        "arrays_readable": True,
        "array_rows": len(checker.ids),
        "ids_ascending": packed.is_strictly_ascending(list(checker.ids)),
    }
    selected = dict.fromkeys(
        (
            "document_kind",
            *documents.CODED_COLUMNS,
            "has_link",
            "message_ids",
            *documents.DISPLAY_COLUMNS,
        )
    )
    start = 0
    for batch in chunks(
        artifact, f"select {', '.join(selected)} from search_documents order by document_id"
    ):
        yield checker.frame(start, batch).assign(**facts)
        start += len(batch)
