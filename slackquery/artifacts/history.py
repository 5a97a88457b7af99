"""Build history: the `search_builds` table in the state database.

Statuses: building → validated → published → superseded (published once, then replaced:
a rollback target while its file is kept), building → failed, or building → interrupted
(stopped by a signal, or the process ended before the build finished). A row left in
`building` is recorded interrupted by the next build or publish, which can tell because
builds hold the artifact lock for their whole run.
"""

import json
from datetime import UTC, datetime
from typing import Any

import duckdb

from slackquery.errors import SlackqueryError

STATUSES = ("building", "validated", "published", "failed", "interrupted", "superseded")
# The builds whose file, arrays and manifest were sealed under their final names: the ones
# publish and rollback accept, and the only ones whose files a cleanup never deletes.
SEALED = ("validated", "published", "superseded")
MAX_ERROR_CHARS = 4000

DDL = """
create table if not exists search_builds (
    build_id varchar primary key,
    status varchar not null,
    source_watermark varchar,
    generation_id varchar,
    counts_json json,
    artifact_path varchar,
    checksum_sha256 varchar,
    validation_json json,
    error_message varchar,
    code_version varchar,
    started_at timestamptz not null,
    completed_at timestamptz,
    published_at timestamptz
)
"""

COLUMNS = (
    "build_id",
    "status",
    "source_watermark",
    "generation_id",
    "counts_json",
    "artifact_path",
    "checksum_sha256",
    "validation_json",
    "error_message",
    "code_version",
    "started_at",
    "completed_at",
    "published_at",
)


def now() -> datetime:
    """The current time in UTC (one place, so every timestamp agrees on the zone)."""
    return datetime.now(UTC)


def ensure_table(conn: duckdb.DuckDBPyConnection) -> None:
    """Create `search_builds` if this state database has none yet."""
    conn.execute(DDL)
    # Earlier versions relabelled failed and interrupted builds `superseded` once their
    # inputs were built again, the label of a build that was published and then replaced:
    # publish took them for rollback targets. Only a published build has `published_at`.
    conn.execute(
        "update search_builds set status = case when error_message like 'interrupted%' "
        "then 'interrupted' else 'failed' end "
        "where status = 'superseded' and published_at is null"
    )


def table_exists(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether the state database has a `search_builds` table (read-only callers)."""
    row = conn.execute(
        "select count(*) from duckdb_tables() where table_name = 'search_builds'"
    ).fetchone()
    return bool(row and row[0])


def insert_building(
    conn: duckdb.DuckDBPyConnection,
    *,
    build_id: str,
    source_watermark: str,
    generation_id: str,
    artifact_path: str,
    code_version: str,
) -> None:
    """Record a build that has started writing its temp file."""
    conn.execute(
        "insert into search_builds (build_id, status, source_watermark, generation_id, "
        "artifact_path, code_version, started_at) values (?, 'building', ?, ?, ?, ?, ?)",
        [build_id, source_watermark, generation_id, artifact_path, code_version, now()],
    )


def mark_validated(
    conn: duckdb.DuckDBPyConnection,
    build_id: str,
    *,
    artifact_path: str,
    checksum: str,
    counts: dict[str, int],
    validation: dict[str, Any],
) -> None:
    """A build whose file passed validation and now sits under its final name."""
    conn.execute(
        "update search_builds set status = 'validated', artifact_path = ?, "
        "checksum_sha256 = ?, counts_json = ?, validation_json = ?, completed_at = ?, "
        "error_message = null where build_id = ?",
        [artifact_path, checksum, json.dumps(counts), json.dumps(validation), now(), build_id],
    )


def mark_failed(
    conn: duckdb.DuckDBPyConnection,
    build_id: str,
    error: str,
    *,
    validation: dict[str, Any] | None = None,
    counts: dict[str, int] | None = None,
) -> None:
    """A build that will never be published, with why (trimmed to a readable size); one
    that validation refused also with its result and the counts it was refused with."""
    conn.execute(
        "update search_builds set status = 'failed', error_message = ?, "
        "validation_json = coalesce(?, validation_json), "
        "counts_json = coalesce(?, counts_json), completed_at = ? where build_id = ?",
        [
            error[:MAX_ERROR_CHARS],
            json.dumps(validation) if validation is not None else None,
            json.dumps(counts) if counts is not None else None,
            now(),
            build_id,
        ],
    )


def mark_interrupted(conn: duckdb.DuckDBPyConnection) -> None:
    """Record every `building` row interrupted; only call while holding the artifact lock."""
    conn.execute(
        "update search_builds set status = 'interrupted', error_message = ?, completed_at = ? "
        "where status = 'building'",
        ["the build process ended before finishing", now()],
    )


def mark_stopped(conn: duckdb.DuckDBPyConnection, build_id: str, signal: BaseException) -> None:
    """A build stopped from outside (Ctrl-C, SIGTERM, a cancel from Prefect): interrupted,
    not failed, and named by what stopped it, since such signals carry no message."""
    reason = f"stopped by {type(signal).__name__}" + (f": {signal}" if str(signal) else "")
    conn.execute(
        "update search_builds set status = 'interrupted', error_message = ?, completed_at = ? "
        "where build_id = ?",
        [reason[:MAX_ERROR_CHARS], now(), build_id],
    )


def mark_published(conn: duckdb.DuckDBPyConnection, build_id: str) -> None:
    """Make `build_id` the one published build; the previously published one is superseded."""
    conn.execute(
        "update search_builds set status = 'superseded' "
        "where status = 'published' and build_id <> ?",
        [build_id],
    )
    conn.execute(
        "update search_builds set status = 'published', published_at = ? where build_id = ?",
        [now(), build_id],
    )


def sealed_build_ids(conn: duckdb.DuckDBPyConnection) -> set[str]:
    """The builds recorded sealed (`SEALED`)."""
    return {
        build_id
        for (build_id,) in conn.execute(
            "select build_id from search_builds "
            f"where status in ({', '.join('?' for _ in SEALED)})",
            list(SEALED),
        ).fetchall()
    }


def previously_published(conn: duckdb.DuckDBPyConnection) -> str | None:
    """The build published just before the current one: the natural rollback target."""
    row = conn.execute(
        "select build_id from search_builds where status = 'superseded' "
        "order by published_at desc, build_id desc limit 1"
    ).fetchone()
    return row[0] if row else None


def latest_validated(conn: duckdb.DuckDBPyConnection) -> str:
    """The newest build that passed validation and is not yet published."""
    row = conn.execute(
        "select build_id from search_builds where status = 'validated' "
        "order by started_at desc, build_id desc limit 1"
    ).fetchone()
    if row is None:
        raise SlackqueryError(f"no validated build waits to be published; {_what_instead(conn)}")
    return row[0]


def _what_instead(conn: duckdb.DuckDBPyConnection) -> str:
    """What to do when no build waits: publish again a newer one a rollback set aside, or
    build one (naming the build that is published)."""
    published, newer = conn.execute(
        "select max(build_id) filter (where status = 'published'), "
        "max(build_id) filter (where status = 'superseded' and build_id > ("
        "select coalesce(max(build_id), '') from search_builds where status = 'published')) "
        "from search_builds"
    ).fetchone() or (None, None)
    if newer:
        return f"{published} is published, rolled back from {newer}: `slackquery publish {newer}`"
    already = f" ({published} is the one published)" if published else ""
    return f"`slackquery build` makes one{already}"


def get_build(conn: duckdb.DuckDBPyConnection, build_id: str) -> dict[str, Any] | None:
    """One build's row as a dict, or None."""
    rows = list_builds(conn, build_id=build_id)
    return rows[0] if rows else None


def list_builds(
    conn: duckdb.DuckDBPyConnection, *, build_id: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Builds, newest first, JSON columns decoded."""
    sql = f"select {', '.join(COLUMNS)} from search_builds"
    params: list[Any] = []
    if build_id is not None:
        sql += " where build_id = ?"
        params.append(build_id)
    sql += " order by started_at desc, build_id desc"
    if limit is not None:
        sql += f" limit {int(limit)}"
    result = []
    for row in conn.execute(sql, params).fetchall():
        record = dict(zip(COLUMNS, row, strict=True))
        for key in ("counts_json", "validation_json"):
            if record[key] is not None:
                record[key] = json.loads(record[key])
        result.append(record)
    return result
