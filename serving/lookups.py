"""The SQL of every lookup by id: a message and its neighbours, a thread's messages.

Search ranks in memory; these small reads go to the artifact's DuckDB with bound
parameters. Rows come back as dicts keyed by column name (the display columns).
"""

import duckdb

from slackquery.artifacts.documents import DISPLAY_COLUMNS

_SELECT = f"select {', '.join(DISPLAY_COLUMNS)} from search_documents"
_SAME_CHANNEL = " where document_kind = 'message' and workspace_id = $w and channel_id = $c"

Row = dict[str, object]


def _rows(cursor: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> list[Row]:
    result = cursor.execute(sql, params)
    names = [column[0] for column in result.description or ()]
    return [dict(zip(names, values, strict=True)) for values in result.fetchall()]


def document(cursor: duckdb.DuckDBPyConnection, document_id: str) -> Row | None:
    """The display columns of one document, or None."""
    rows = _rows(cursor, _SELECT + " where document_id = $id", {"id": document_id})
    return rows[0] if rows else None


def neighbours(
    cursor: duckdb.DuckDBPyConnection, target: Row, before: int, after: int
) -> tuple[list[Row], list[Row]]:
    """Up to `before` earlier and `after` later messages beside the target as Slack shows
    it, each list in time order (ties by document id): a reply's are the other messages
    of its thread; a channel message's are the channel's messages outside threads (roots
    and replies also sent to the channel included), not the replies of other threads
    posted meanwhile."""
    key = {
        "w": target["workspace_id"],
        "c": target["channel_id"],
        "ts": target["ts_us"],
        "id": target["document_id"],
    }
    if target["is_thread_reply"]:
        beside = _SAME_CHANNEL + " and thread_id = $t"
        key["t"] = target["thread_id"]
    else:
        beside = (
            _SAME_CHANNEL
            + " and not (coalesce(is_thread_reply, false)"
            + " and not coalesce(is_thread_broadcast, false))"
        )
    earlier = _rows(
        cursor,
        _SELECT + beside + " and (ts_us < $ts or (ts_us = $ts and document_id < $id))"
        " order by ts_us desc, document_id desc limit $n",
        {**key, "n": before},
    )
    later = _rows(
        cursor,
        _SELECT + beside + " and (ts_us > $ts or (ts_us = $ts and document_id > $id))"
        " order by ts_us, document_id limit $n",
        {**key, "n": after},
    )
    return list(reversed(earlier)), later


def thread_messages(
    cursor: duckdb.DuckDBPyConnection, thread_id: str, limit: int, offset: int = 0
) -> list[Row]:
    """`limit` messages of a thread in time order, from the `offset`-th (from 0)."""
    return _rows(
        cursor,
        _SELECT + " where document_kind = 'message' and thread_id = $t"
        " order by ts_us, document_id limit $n offset $o",
        {"t": thread_id, "n": limit, "o": offset},
    )
