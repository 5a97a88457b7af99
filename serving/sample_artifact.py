"""Write a search artifact straight from a list of messages, for serving tests and benchmarks.

The real artifact comes from the pipeline (import -> dbt -> embed -> build -> validate).
Serving's tests and the retrieval benchmark need artifacts of chosen shapes and sizes
(tricky text, 100k/1M messages) without running that pipeline, so this writer produces a
file with exactly the published schema (docs/architecture.md, "Search artifact"), the
contract FTS index, and the `current.duckdb` pointer swap.
"""

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from slackquery.duckdb_setup import connect
from slackquery.embedding.base import GenerationIdentity

FTS_CONFIG = {
    "stemmer": "none",
    "stopwords": "none",
    "lower": 1,
    "strip_accents": 1,
    "ignore": r"[^\p{L}\p{N}]+",
}

DDL = """
create table artifact_metadata (
    build_id varchar, schema_version integer, generation_id varchar, generation_json json,
    source_watermark varchar, document_count bigint, message_count bigint,
    thread_context_count bigint, vector_count bigint, fts_config_json json,
    code_version varchar, built_at timestamptz
);
create table search_documents (
    document_id varchar primary key, document_kind varchar, workspace_id varchar,
    workspace_name varchar, workspace_slug varchar, channel_id varchar, channel_name varchar,
    conversation_type varchar, author_id varchar, author_name varchar, ts varchar,
    ts_us bigint, posted_at timestamptz, thread_id varchar, thread_root_id varchar,
    is_thread_parent boolean, is_thread_reply boolean, is_thread_broadcast boolean,
    is_bot boolean, text_display varchar, text_lexical varchar, permalink varchar,
    source_message_id varchar, message_ids varchar[], metadata_json json
);
create table workspaces (
    workspace_id varchar, workspace_slug varchar, workspace_name varchar, workspace_url varchar
);
create table channels (
    workspace_id varchar, channel_id varchar, channel_name varchar, conversation_type varchar,
    message_count bigint, first_ts_us bigint, last_ts_us bigint
);
create table users (
    workspace_id varchar, user_id varchar, user_name varchar, username varchar,
    real_name varchar, display_name varchar
);
"""


@dataclass(frozen=True)
class SampleMessage:
    """One message of a sample corpus; `thread_ts` names its thread root's ts, if any."""

    workspace_id: str
    workspace_slug: str
    channel_id: str
    channel_name: str
    user_id: str
    user_name: str
    ts: str
    text: str
    thread_ts: str | None = None
    conversation_type: str = "public"
    workspace_name: str = ""
    real_name: str = ""


def _ts_us(ts: str) -> int:
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int((fraction + "000000")[:6])


def _permalink(message: SampleMessage) -> str:
    digits = message.ts.replace(".", "")
    link = f"https://{message.workspace_slug}.slack.com/archives/{message.channel_id}/p{digits}"
    if message.thread_ts and message.thread_ts != message.ts:
        link += f"?thread_ts={message.thread_ts}&cid={message.channel_id}"
    return link


def build_documents(messages: Sequence[SampleMessage]) -> pd.DataFrame:
    """Message documents plus one thread-context document per thread, by document id."""
    rows: list[dict[str, object]] = []
    threads: dict[str, list[SampleMessage]] = {}
    for message in messages:
        key = f"{message.workspace_id}:{message.channel_id}:"
        thread_id = key + message.thread_ts if message.thread_ts else None
        document_id = key + message.ts
        if thread_id:
            threads.setdefault(thread_id, []).append(message)
        rows.append(
            {
                "document_id": document_id,
                "document_kind": "message",
                "workspace_id": message.workspace_id,
                "workspace_name": message.workspace_name or message.workspace_slug,
                "workspace_slug": message.workspace_slug,
                "channel_id": message.channel_id,
                "channel_name": message.channel_name,
                "conversation_type": message.conversation_type,
                "author_id": message.user_id,
                "author_name": message.user_name,
                "ts": message.ts,
                "ts_us": _ts_us(message.ts),
                "thread_id": thread_id,
                "thread_root_id": key + message.thread_ts if message.thread_ts else document_id,
                "is_thread_parent": bool(message.thread_ts and message.thread_ts == message.ts),
                "is_thread_reply": bool(message.thread_ts and message.thread_ts != message.ts),
                "text_display": message.text,
                "text_lexical": message.text,
                "permalink": _permalink(message),
                "source_message_id": document_id,
                "message_ids": [document_id],
            }
        )
    for thread_id, members in threads.items():
        members = sorted(members, key=lambda m: _ts_us(m.ts))
        root = next((m for m in members if m.ts == m.thread_ts), members[0])
        text = "\n".join(f"{m.user_name}: {m.text}" for m in members)
        root_id = f"{root.workspace_id}:{root.channel_id}:{root.ts}"
        rows.append(
            {
                "document_id": f"thread:{thread_id}",
                "document_kind": "thread_context",
                "workspace_id": root.workspace_id,
                "workspace_name": root.workspace_name or root.workspace_slug,
                "workspace_slug": root.workspace_slug,
                "channel_id": root.channel_id,
                "channel_name": root.channel_name,
                "conversation_type": root.conversation_type,
                "author_id": root.user_id,
                "author_name": root.user_name,
                "ts": root.ts,
                "ts_us": _ts_us(root.ts),
                "thread_id": thread_id,
                "thread_root_id": root_id,
                "is_thread_parent": False,
                "is_thread_reply": False,
                "text_display": text,
                "text_lexical": text,
                "permalink": _permalink(root),
                "source_message_id": root_id,
                "message_ids": [f"{m.workspace_id}:{m.channel_id}:{m.ts}" for m in members],
            }
        )
    frame = pd.DataFrame(rows).sort_values("document_id", kind="stable").reset_index(drop=True)
    frame["is_thread_broadcast"] = False
    frame["is_bot"] = False
    frame["metadata_json"] = "{}"
    return frame


def write_artifact(
    path: Path,
    messages: Sequence[SampleMessage],
    vectors: np.ndarray,
    identity: GenerationIdentity,
    build_id: str,
) -> Path:
    """Write `path` (vectors[i] belongs to messages[i]) and build its FTS index."""
    documents = build_documents(messages)
    message_ids = [f"{m.workspace_id}:{m.channel_id}:{m.ts}" for m in messages]
    flat = np.ascontiguousarray(vectors, dtype=np.float32)
    dimension = int(flat.shape[1])
    connection = connect(str(path))
    try:
        connection.execute(DDL)
        connection.register("documents_frame", documents)
        columns = ", ".join(documents.columns)
        connection.execute(
            f"insert into search_documents ({columns}) select {columns} from documents_frame "
            "order by document_id"
        )
        connection.execute("update search_documents set posted_at = make_timestamptz(ts_us)")
        # Vectors travel as one float column per component, folded into arrays in SQL.
        wide = pd.DataFrame(flat, columns=[f"c{i}" for i in range(dimension)])
        wide.insert(0, "document_id", message_ids)
        connection.register("vector_frame", wide)
        components = ", ".join(f"c{i}" for i in range(dimension))
        connection.execute(
            f"create table document_vectors as select document_id, "
            f"[{components}]::float[{dimension}] as embedding "
            "from vector_frame order by document_id"
        )
        connection.execute(
            """
            insert into workspaces
            select distinct workspace_id, workspace_slug, workspace_name,
                   'https://' || workspace_slug || '.slack.com'
            from search_documents
            """
        )
        connection.execute(
            """
            insert into channels
            select workspace_id, channel_id, any_value(channel_name), any_value(conversation_type),
                   count(*) filter (where document_kind = 'message'), min(ts_us), max(ts_us)
            from search_documents group by workspace_id, channel_id
            """
        )
        users = sorted({(m.workspace_id, m.user_id, m.user_name, m.real_name) for m in messages})
        connection.executemany(
            "insert into users values (?, ?, ?, ?, ?, ?)",
            [
                (w, u, name, name.lower().replace(" ", "."), real or name, name)
                for w, u, name, real in users
            ],
        )
        connection.execute(
            r"pragma create_fts_index('search_documents', 'document_id', 'text_lexical', "
            r"stemmer='none', stopwords='none', ignore='[^\p{L}\p{N}]+', strip_accents=1, "
            r"lower=1, overwrite=1)"
        )
        counts = connection.execute(
            "select count(*), count(*) filter (where document_kind = 'message') "
            "from search_documents"
        ).fetchone()
        assert counts is not None
        connection.execute(
            "insert into artifact_metadata values (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, 'sample', ?)",
            [
                build_id,
                identity.generation_id,
                json.dumps(identity.to_dict()),
                "sample",
                counts[0],
                counts[1],
                counts[0] - counts[1],
                len(message_ids),
                json.dumps(FTS_CONFIG),
                datetime.now(UTC),
            ],
        )
        connection.execute("checkpoint")
    finally:
        connection.close()
    return path


def publish_pointer(artifact_dir: Path, artifact: Path) -> None:
    """Point `current.duckdb` at `artifact` atomically (relative temp symlink + replace)."""
    temporary = artifact_dir / f".current.{os.getpid()}.tmp"
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(os.path.relpath(artifact, artifact_dir))
    os.replace(temporary, artifact_dir / "current.duckdb")
