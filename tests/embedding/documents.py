"""A tiny `search_documents` table with the exact columns of docs/architecture.md.

The dbt projection builds the real table; the embedding tests only need its contract, so
they create it here and stay independent of dbt.
"""

import hashlib
from collections.abc import Iterable
from pathlib import Path

import duckdb

SEARCH_DOCUMENTS_DDL = """
create table search_documents (
    document_id varchar primary key,
    document_kind varchar,
    workspace_id varchar,
    workspace_name varchar,
    workspace_slug varchar,
    workspace_url varchar,
    channel_id varchar,
    channel_name varchar,
    conversation_type varchar,
    author_id varchar,
    author_name varchar,
    ts varchar,
    ts_us bigint,
    posted_at timestamptz,
    thread_id varchar,
    thread_root_id varchar,
    is_thread_parent boolean,
    is_thread_reply boolean,
    is_thread_broadcast boolean,
    is_bot boolean,
    text_display varchar,
    text_lexical varchar,
    text_embedding varchar,
    text_hash varchar,
    permalink varchar,
    source_message_id varchar,
    message_ids varchar[],
    metadata_json json,
    files json,
    is_active boolean,
    payload_hash varchar
)
"""

TOPICS = (
    "the deploy failed with ERR-42 after the migration",
    "postgres rejected the password with 28P01",
    "lunch plans for friday at the taco place",
    "release v2.3.1 is tagged and the changelog is out",
    "the on-call rotation changes next week",
    "who owns the billing dashboard now",
    "Привет, база данных снова недоступна",
    "数据库 连接 超时 了",
)


def message_texts(count: int) -> list[str]:
    """`count` distinct short message texts rendered like `text_embedding`."""
    return [f"#general user{i % 5}: {TOPICS[i % len(TOPICS)]} (item {i})" for i in range(count)]


def upsert_documents(
    connection: duckdb.DuckDBPyConnection,
    texts: Iterable[str],
    *,
    kind: str = "message",
    active: bool = True,
    start: int = 0,
) -> list[str]:
    """Insert or replace documents `D<n>` with the given embedding texts; returns their ids."""
    ids = []
    for offset, text in enumerate(texts):
        number = start + offset
        document_id = f"W1:C1:{1700000000 + number}.000100"
        if kind == "thread_context":
            document_id = f"thread:W1:C1:{1700000000 + number}.000100"
        ids.append(document_id)
        connection.execute("delete from search_documents where document_id = ?", [document_id])
        connection.execute(
            """
            insert into search_documents (
                document_id, document_kind, workspace_id, channel_id, channel_name,
                author_id, author_name, ts, ts_us, text_display, text_lexical,
                text_embedding, text_hash, message_ids, is_active, payload_hash
            ) values (?, ?, 'W1', 'C1', 'general', 'U1', 'user', ?, ?, ?, ?, ?, ?, ?, ?, 'p')
            """,
            [
                document_id,
                kind,
                f"{1700000000 + number}.000100",
                (1700000000 + number) * 1_000_000 + 100,
                text,
                text,
                text,
                hashlib.sha256(text.encode("utf-8")).hexdigest(),
                [document_id],
                active,
            ],
        )
    return ids


def create_state_db(path: Path, texts: Iterable[str]) -> list[str]:
    """A state DB at `path` holding `search_documents` with one active message per text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = duckdb.connect(str(path))
    try:
        connection.execute(SEARCH_DOCUMENTS_DDL)
        return upsert_documents(connection, texts)
    finally:
        connection.close()
