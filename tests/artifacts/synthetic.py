"""A synthetic state database: the search marts and embedding tables, in SQL.

Tests and `benchmarks/artifact_bench.py` build their state with this instead of running
import → dbt → embed, so the artifact part is exercised on its own contract. Everything
is derived from `hash(…, seed)`, so the same arguments always give the same database.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np

from slackquery.duckdb_setup import open_database
from slackquery.embedding.base import GenerationIdentity
from slackquery.embedding.current import CURRENT_VECTORS
from slackquery.embedding.state import SCHEMA as EMBEDDING_SCHEMA

VOCABULARY = [
    "deploy",
    "rollback",
    "postgres",
    "timeout",
    "latency",
    "incident",
    "alert",
    "pager",
    "kafka",
    "consumer",
    "lag",
    "release",
    "canary",
    "migration",
    "schema",
    "index",
    "vacuum",
    "replica",
    "failover",
    "dns",
    "certificate",
    "expired",
    "quota",
    "billing",
    "invoice",
    "customer",
    "ticket",
    "escalation",
    "oncall",
    "runbook",
    "dashboard",
    "grafana",
    "metrics",
    "logging",
    "tracing",
    "span",
    "error",
    "retry",
    "backoff",
    "queue",
    "worker",
    "cron",
    "snapshot",
    "backup",
    "restore",
    "bucket",
    "terraform",
    "module",
    "provider",
    "cluster",
    "node",
    "pod",
    "memory",
    "leak",
    "profile",
    "flamegraph",
    "regression",
    "benchmark",
    "cache",
    "eviction",
    "hotfix",
]

SEARCH_DOCUMENTS_DDL = """
create table search_documents (
    document_id varchar primary key,
    document_kind varchar,
    workspace_id varchar, workspace_name varchar, workspace_slug varchar, workspace_url varchar,
    channel_id varchar, channel_name varchar, conversation_type varchar,
    author_id varchar, author_name varchar,
    ts varchar, ts_us bigint, posted_at timestamptz,
    thread_id varchar, thread_root_id varchar,
    is_thread_parent boolean, is_thread_reply boolean, is_thread_broadcast boolean,
    is_bot boolean,
    text_display varchar, text_lexical varchar, has_link boolean,
    text_embedding varchar, text_hash varchar,
    permalink varchar, source_message_id varchar, message_ids varchar[], metadata_json json,
    files json, is_active boolean, payload_hash varchar
)
"""

MESSAGES_SQL = """
insert into search_documents
with numbered as (
    select
        i,
        i // $thread_every as block,
        i % $thread_every as position,
        (i // $thread_every) % $channels as channel_index,
        ((i // $thread_every) // $channels) % $workspaces as workspace_index,
        1700000000 + i as seconds
    from range($messages) as numbers(i)
),
shaped as (
    select
        *,
        'W' || workspace_index as workspace_id,
        'C' || workspace_index || 'X' || channel_index as channel_id,
        format('{}.{:06d}', seconds, i % 1000000) as ts,
        seconds * 1000000 + i % 1000000 as ts_us,
        'U' || (hash(i, $seed) % 20) as author_id,
        position <= $replies as in_thread,
        i % $inactive_every = $inactive_every - 1 as is_tombstone,
        list_aggregate(
            list_transform(
                range(8),
                k -> $vocabulary[1 + (hash(i, k, $seed) % len($vocabulary))::integer]
            ),
            'string_agg', ' '
        ) || ' ERR-' || (i % 97) as words
    from numbered
),
threaded as (
    select
        *,
        workspace_id || ':' || channel_id || ':' as key_prefix,
        format('{}.{:06d}', 1700000000 + block * $thread_every,
            (block * $thread_every) % 1000000) as root_ts
    from shaped
)
select
    key_prefix || ts,
    'message',
    workspace_id, 'Workspace ' || workspace_id, lower(workspace_id) || '-corp',
    'https://' || lower(workspace_id) || '-corp.slack.com',
    channel_id, 'channel-' || channel_id,
    case when channel_id like '%X0' then 'public' else 'private' end,
    author_id, 'user ' || author_id,
    ts, ts_us, make_timestamptz(ts_us),
    case when in_thread then key_prefix || root_ts end,
    case when in_thread then key_prefix || root_ts else key_prefix || ts end,
    in_thread and position = 0,
    in_thread and position > 0,
    false,
    author_id = 'U0',
    case when is_tombstone then '' else words end,
    case when is_tombstone then '' else words || ' ' || author_id end,
    false,
    '#channel-' || channel_id || ' user ' || author_id || ': ' || words,
    sha256('#channel-' || channel_id || ' user ' || author_id || ': ' || words),
    'https://' || lower(workspace_id) || '-corp.slack.com/archives/' || channel_id || '/p'
        || replace(ts, '.', ''),
    key_prefix || ts,
    [key_prefix || ts],
    json_object('subtype', null, 'is_edited', false),
    case when i % 50 = 7 then json_array(json_object(
        'file_id', 'F' || i, 'name', 'log-' || i || '.txt', 'title', null,
        'mimetype', 'text/plain'
    )) end,
    not is_tombstone,
    md5(i::varchar || ':' || $seed)
from threaded
"""

THREADS_SQL = """
insert into search_documents
with members as (
    select * from search_documents
    where document_kind = 'message' and thread_id is not null and is_active
),
threads as (
    select
        thread_id,
        arg_min(document_id, ts_us) as root_id,
        list(document_id order by ts_us) as message_ids,
        string_agg('[' || strftime(posted_at, '%Y-%m-%dT%H:%M:%SZ') || '] '
            || author_name || ': ' || text_display, chr(10) || chr(10) order by ts_us) as body,
        md5(string_agg(payload_hash, ',' order by ts_us)) as payload_hash
    from members
    group by 1
    having count(*) > 1
)
select
    'thread:' || threads.thread_id, 'thread_context',
    root.workspace_id, root.workspace_name, root.workspace_slug, root.workspace_url,
    root.channel_id, root.channel_name, root.conversation_type,
    root.author_id, root.author_name,
    root.ts, root.ts_us, root.posted_at,
    threads.thread_id, root.document_id,
    false, false, false, false,
    threads.body, threads.body, false, threads.body, sha256(threads.body),
    root.permalink, root.source_message_id, threads.message_ids,
    json_object('message_count', len(threads.message_ids)),
    null,
    true, threads.payload_hash
from threads
inner join members as root on threads.root_id = root.document_id
"""

# The name marts, in the shape `models/marts/search/` gives them: every author a member.
NAME_MARTS_SQL = """
create table search_users as
select distinct
    workspace_id || ':' || author_id as user_key,
    workspace_id,
    author_id as user_id,
    author_name as user_name,
    lower(replace(author_name, ' ', '.')) as username,
    author_name as real_name,
    null::varchar as display_name,
    author_id = 'U0' as is_bot,
    false as is_deleted,
    false as is_guest,
    null::varchar as account_limit,
    bool_or(is_active) over (partition by workspace_id, author_id) as is_author
from search_documents
where document_kind = 'message';
create table search_workspaces as
select distinct workspace_id, workspace_slug, workspace_name, workspace_url
from search_documents
where is_active;
create table search_channels as
select
    workspace_id || ':' || channel_id as channel_key, workspace_id, channel_id,
    any_value(channel_name) as channel_name, any_value(conversation_type) as conversation_type,
    count(*) as count_messages, min(ts_us) as first_ts_us, max(ts_us) as last_ts_us
from search_documents
where is_active and document_kind = 'message'
group by 1, 2, 3;
"""

# Every author of a channel is a member of it (the `search_channel_members` mart).
MEMBERS_SQL = """
create table search_channel_members as
select distinct
    workspace_id || ':' || channel_id || ':' || author_id as channel_member_key,
    workspace_id,
    channel_id,
    conversation_type,
    author_id as user_id,
    true as is_workspace_user,
    false as is_external
from search_documents
where document_kind = 'message'
"""

VECTORS_SQL = """
insert into embedding_work_items
with raw as (
    select
        document_id,
        text_hash,
        list_transform(
            range($dimension),
            k -> (hash(document_id, k, $seed) % 2000001)::double / 1000000.0 - 1.0
        ) as vector
    from search_documents
    where document_kind = 'message' and is_active
),
normed as (
    select document_id, text_hash, vector, sqrt(list_dot_product(vector, vector)) as norm
    from raw
)
select
    document_id, $generation_id, text_hash, 'succeeded', 1, null, null, null, null, null,
    list_transform(vector, x -> x / norm)::float[], now(), now()
from normed
"""


def synthesize_state(
    state_path: Path,
    identity: GenerationIdentity,
    *,
    messages: int,
    seed: int = 0,
    workspaces: int = 2,
    channels: int = 3,
    thread_every: int = 10,
    replies: int = 3,
    inactive_every: int = 50,
    embed: bool = True,
) -> dict[str, Any]:
    """Create (or replace) the mart and embedding tables; return the row counts."""
    state_path.parent.mkdir(parents=True, exist_ok=True)
    conn = open_database(str(state_path))
    try:
        conn.execute("set enable_progress_bar = false")
        conn.execute("drop table if exists search_documents")
        for mart in ("search_users", "search_workspaces", "search_channels"):
            conn.execute(f"drop table if exists {mart}")
        conn.execute("drop table if exists search_channel_members")
        conn.execute("drop table if exists embedding_work_items")
        conn.execute("drop table if exists embedding_generations")
        conn.execute(SEARCH_DOCUMENTS_DDL)
        conn.execute(EMBEDDING_SCHEMA)
        conn.execute(
            MESSAGES_SQL,
            {
                "messages": messages,
                "seed": seed,
                "workspaces": workspaces,
                "channels": channels,
                "thread_every": thread_every,
                "replies": replies,
                "inactive_every": inactive_every,
                "vocabulary": list(VOCABULARY),
            },
        )
        conn.execute(THREADS_SQL)
        conn.execute(NAME_MARTS_SQL)
        conn.execute(MEMBERS_SQL)
        conn.execute(
            "insert into embedding_generations values (?, ?, ?, now())",
            [identity.generation_id, _identity_json(identity), identity.config_hash],
        )
        if embed:
            embed_all(conn, identity, seed=seed)
        row = conn.execute(
            "select count(*), count(*) filter (where is_active and document_kind = 'message'), "
            "count(*) filter (where document_kind = 'thread_context') from search_documents"
        ).fetchone()
        assert row is not None
        return {"documents": row[0], "active_messages": row[1], "thread_contexts": row[2]}
    finally:
        conn.close()


def _identity_json(identity: GenerationIdentity) -> str:
    return json.dumps(identity.to_dict(), sort_keys=True)


def embed_all(conn: Any, identity: GenerationIdentity, *, seed: int = 0) -> None:
    """Give every active message a succeeded unit vector at its current text hash."""
    conn.execute(
        "delete from embedding_work_items where generation_id = ?", [identity.generation_id]
    )
    conn.execute(
        VECTORS_SQL,
        {
            "dimension": identity.stored_dimension,
            "seed": seed,
            "generation_id": identity.generation_id,
        },
    )


def embed_only(state_path: Path, count: int) -> None:
    """Keep the vectors of the first `count` embedded documents (by id); the rest go back to
    `pending`, as if embedding had not reached them yet."""
    conn = open_database(str(state_path))
    try:
        conn.execute(
            "update embedding_work_items set state = 'pending', embedding = null "
            "where document_id not in (select document_id from embedding_work_items "
            "order by document_id limit ?)",
            [count],
        )
    finally:
        conn.close()


def embed_every_other(state_path: Path) -> None:
    """Keep the vectors of every other document (by id), the rest back to `pending`: a vector's
    position in the artifact's matrix then differs from its row."""
    conn = open_database(str(state_path))
    try:
        conn.execute(
            "update embedding_work_items set state = 'pending', embedding = null "
            "where document_id in (select document_id from (select document_id, row_number() "
            "over (order by document_id) as number from embedding_work_items) where number % 2 = 0)"
        )
    finally:
        conn.close()


def current_vectors(state_path: Path, generation_id: str) -> dict[str, np.ndarray]:
    """Each document's current vector in the state, float32: what an artifact must hold."""
    conn = open_database(str(state_path), read_only=True)
    try:
        rows = conn.execute(
            f"select document_id, embedding from ({CURRENT_VECTORS})",
            {"generation_id": generation_id},
        ).fetchall()
    finally:
        conn.close()
    return {document: np.asarray(vector, np.float32) for document, vector in rows}
