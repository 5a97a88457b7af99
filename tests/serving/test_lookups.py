import duckdb

from serving import lookups
from slackquery.artifacts.documents import DISPLAY_COLUMNS


def _channel(rows: list[tuple[str, int, str | None, bool, bool]]) -> duckdb.DuckDBPyConnection:
    """A search_documents table of one channel: (id, ts_us, thread_id, reply, broadcast)."""
    conn = duckdb.connect()
    columns = ", ".join(f"{name} VARCHAR" for name in DISPLAY_COLUMNS)
    conn.execute(
        f"create table search_documents ({columns}, document_kind VARCHAR,"
        " is_thread_broadcast BOOLEAN)"
    )
    conn.execute(
        "alter table search_documents alter ts_us type BIGINT;"
        "alter table search_documents alter is_thread_reply type BOOLEAN"
    )
    for document_id, ts_us, thread_id, reply, broadcast in rows:
        conn.execute(
            "insert into search_documents (document_id, workspace_id, channel_id, ts_us,"
            " thread_id, is_thread_reply, is_thread_broadcast, document_kind)"
            " values (?, 'W', 'C', ?, ?, ?, ?, 'message')",
            [document_id, ts_us, thread_id, reply, broadcast],
        )
    return conn


def test_a_reply_also_sent_to_the_channel_is_beside_the_channel_messages() -> None:
    conn = _channel(
        [
            ("root", 1, "root", False, False),
            ("reply", 2, "root", True, False),
            ("broadcast", 3, "root", True, True),
            ("later", 4, None, False, False),
        ]
    )
    target = lookups.document(conn, "later")
    assert target is not None
    before, _ = lookups.neighbours(conn, target, 5, 0)
    # Slack shows the broadcast in the channel; the plain reply only in its thread.
    assert [row["document_id"] for row in before] == ["root", "broadcast"]
    reply = lookups.document(conn, "reply")
    assert reply is not None
    earlier, later = lookups.neighbours(conn, reply, 5, 5)
    assert [row["document_id"] for row in earlier + later] == ["root", "broadcast"]
