"""The artifact schema (version 10): one ordered column list per published table.

Version 3 added the vector arrays beside the DuckDB file (arrays.py); serving maps them
instead of reading `document_vectors`, so a version 2 artifact (no arrays) is refused
with "build and publish a new one" rather than loaded the old way. Version 4 added the
BM25 postings and per-document arrays (postings.py, documents.py) for the same reason:
serving maps them instead of reading the FTS tables and `search_documents` at load; and it
records `artifact_metadata.vector_coverage`, because an artifact may now hold vectors for
only part of its messages (`artifact_min_vector_coverage`). Version 5 keeps the vectors
only in the arrays: `document_vectors` holds each vector's document and its *sketch*
instead of the vector, so a build writes and checksums the vectors once instead of twice.
Version 6 adds the int4 nibbles of the vector codes to the arrays (arrays.py), which a
semantic pass over every vector reads; its tables are version 5's. Version 7 stores each
row's display columns as one record (`documents.DisplayRecords`) instead of three arrays
per column; its tables are version 6's. Version 8 adds each reply's root row and each
root's replies (`documents.DTYPES`), which the lexical arm's root field reads; its tables
are version 7's. Version 9 adds `limited_accounts`: serving shows an account Slack has
deactivated nothing, and a guest only the conversations it is a member of. Version 10
adds `search_documents.files` (a message's attached files), a display column, so search
hits and message records name the files a message carries.

This module is the single Python statement of the artifact contract in
docs/architecture.md. The build creates tables from it and the Great Expectations suites
compare the built file against it, so a change here changes both at once.
"""

from dataclasses import dataclass

import numpy as np

from slackquery.projection import project_vars

SCHEMA_VERSION = 10

# The FTS index the dbt macro builds over the artifact's documents.
FTS_RELATION = "search_documents"
FTS_ID_COLUMN = "document_id"
FTS_TEXT_COLUMNS = ("text_lexical",)
# DuckDB names an index's schema `fts_<schema>_<table>`; its tables and macros live there.
FTS_SCHEMA = f"fts_main_{FTS_RELATION}"

# The values of every `conversation_type` column (dbt var `conversation_types`).
CONVERSATION_TYPES: tuple[str, ...] = tuple(project_vars()["conversation_types"])

# A vector's sketch: its inner products with this many fixed probe vectors. The build
# computes it in SQL from the state's vector, validation in NumPy from the array row the
# vector landed in, so every array row is tied to its document's vector without a second
# copy of the matrix. One probe already separates two different unit vectors by ~0.05 on
# average; four make a coincidence within SKETCH_TOLERANCE about one in 10**8.
SKETCH_PROBES = 4
# Both sides sum 768 float32 products in their own order: each can be off by up to
# ~1e-4 for unit vectors and unit probes (Cauchy-Schwarz bounds the sum of |products|).
SKETCH_TOLERANCE = 1e-3
_SKETCH_SEED = 20261204


def sketch_probes(dimension: int) -> np.ndarray:
    """The fixed unit probe vectors, float32 `(SKETCH_PROBES, dimension)`, the same for
    every build of a dimension."""
    probes = np.random.default_rng(_SKETCH_SEED).standard_normal((SKETCH_PROBES, dimension))
    return (probes / np.linalg.norm(probes, axis=1, keepdims=True)).astype(np.float32)


@dataclass(frozen=True)
class Column:
    """One artifact column: its name and DuckDB type as `duckdb_columns()` reports it."""

    name: str
    type: str


def _columns(*pairs: tuple[str, str]) -> tuple[Column, ...]:
    return tuple(Column(name, type_) for name, type_ in pairs)


ARTIFACT_METADATA = _columns(
    ("build_id", "VARCHAR"),
    ("schema_version", "INTEGER"),
    ("generation_id", "VARCHAR"),
    ("generation_json", "JSON"),
    ("source_watermark", "VARCHAR"),
    ("document_count", "BIGINT"),
    ("message_count", "BIGINT"),
    ("thread_context_count", "BIGINT"),
    ("vector_count", "BIGINT"),
    # vector_count / message_count: the share of messages semantic ranking can reach.
    ("vector_coverage", "DOUBLE"),
    ("fts_config_json", "JSON"),
    ("code_version", "VARCHAR"),
    ("built_at", "TIMESTAMP WITH TIME ZONE"),
)

# The state mart's columns the artifact keeps, in the mart's order: all but text_embedding,
# text_hash, is_active, payload_hash and workspace_url. A column added to the mart reaches
# artifacts only once listed here, with a new SCHEMA_VERSION (tests/artifacts/test_schema.py).
SEARCH_DOCUMENTS = _columns(
    ("document_id", "VARCHAR"),
    ("document_kind", "VARCHAR"),
    ("workspace_id", "VARCHAR"),
    ("workspace_name", "VARCHAR"),
    ("workspace_slug", "VARCHAR"),
    ("channel_id", "VARCHAR"),
    ("channel_name", "VARCHAR"),
    ("conversation_type", "VARCHAR"),
    ("author_id", "VARCHAR"),
    ("author_name", "VARCHAR"),
    ("ts", "VARCHAR"),
    ("ts_us", "BIGINT"),
    ("posted_at", "TIMESTAMP WITH TIME ZONE"),
    ("thread_id", "VARCHAR"),
    ("thread_root_id", "VARCHAR"),
    ("is_thread_parent", "BOOLEAN"),
    ("is_thread_reply", "BOOLEAN"),
    ("is_thread_broadcast", "BOOLEAN"),
    ("is_bot", "BOOLEAN"),
    ("text_display", "VARCHAR"),
    ("text_lexical", "VARCHAR"),
    ("has_link", "BOOLEAN"),
    ("permalink", "VARCHAR"),
    ("source_message_id", "VARCHAR"),
    ("message_ids", "VARCHAR[]"),
    ("metadata_json", "JSON"),
    ("files", "JSON"),
)

WORKSPACES = _columns(
    ("workspace_id", "VARCHAR"),
    ("workspace_slug", "VARCHAR"),
    ("workspace_name", "VARCHAR"),
    ("workspace_url", "VARCHAR"),
)

CHANNELS = _columns(
    ("workspace_id", "VARCHAR"),
    ("channel_id", "VARCHAR"),
    ("channel_name", "VARCHAR"),
    ("conversation_type", "VARCHAR"),
    ("message_count", "BIGINT"),
    ("first_ts_us", "BIGINT"),
    ("last_ts_us", "BIGINT"),
)

USERS = _columns(
    ("workspace_id", "VARCHAR"),
    ("user_id", "VARCHAR"),
    ("user_name", "VARCHAR"),
    ("username", "VARCHAR"),
    ("real_name", "VARCHAR"),
    ("display_name", "VARCHAR"),
)

# Who belongs to which conversation (the `search_channel_members` mart): serving decides
# from it which private channels, DMs and group DMs a requester may see.
CHANNEL_MEMBERS = _columns(
    ("workspace_id", "VARCHAR"),
    ("channel_id", "VARCHAR"),
    ("conversation_type", "VARCHAR"),
    ("user_id", "VARCHAR"),
    ("is_workspace_user", "BOOLEAN"),
    ("is_external", "BOOLEAN"),
)


# The accounts serving limits (`search_users` with an `account_limit`): `deactivated` (who
# left sees nothing, whatever grant or membership they kept) and `guest` (only the
# conversations it is a member of, public channels included, as in Slack).
ACCOUNT_LIMITS = ("deactivated", "guest")
LIMITED_ACCOUNTS = _columns(
    ("workspace_id", "VARCHAR"),
    ("user_id", "VARCHAR"),
    ("account_limit", "VARCHAR"),
)


def vector_coverage(vector_count: int, message_count: int) -> float:
    """`artifact_metadata.vector_coverage`: the share of message documents with a vector
    (1.0 when there are no messages: nothing is left for semantic ranking to miss)."""
    return vector_count / message_count if message_count else 1.0


# One row per vector of the arrays (`vectors.npy`), which hold the vectors themselves.
DOCUMENT_VECTORS = _columns(
    ("document_id", "VARCHAR"),
    ("vector_sketch", f"FLOAT[{SKETCH_PROBES}]"),
)

# Every published table (the FTS index schema aside) with its ordered columns.
TABLE_COLUMNS = {
    "artifact_metadata": ARTIFACT_METADATA,
    "search_documents": SEARCH_DOCUMENTS,
    "document_vectors": DOCUMENT_VECTORS,
    "workspaces": WORKSPACES,
    "channels": CHANNELS,
    "users": USERS,
    "channel_members": CHANNEL_MEMBERS,
    "limited_accounts": LIMITED_ACCOUNTS,
}


def schema_signature(columns: tuple[Column, ...]) -> str:
    """One comparable string for an ordered column list: `name type, name type, …`."""
    return ", ".join(f"{column.name} {column.type}" for column in columns)


def create_table_sql(schema: str, table: str, columns: tuple[Column, ...], key: str | None) -> str:
    """`create table` DDL for one artifact table, with an optional primary key."""
    body = [f"{column.name} {column.type}" for column in columns]
    if key is not None:
        body.append(f"primary key ({key})")
    return f"create table {schema}.{table} ({', '.join(body)})"
