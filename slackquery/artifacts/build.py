"""`build_artifact`: write, index, validate and seal a new immutable search artifact.

Order of work, and why each step is safe to die in:
1. Under the artifact lock, earlier builds left `building` are recorded interrupted, and
   what dead runs left is removed (`retention.remove_leftovers`: `.tmp` files, and the
   final-named files of a build killed after renaming them but before its manifest); a
   build holds the lock for its whole run, so none is running.
2. Coverage gate (`artifact_min_vector_coverage` of the active messages have a vector),
   then a `building` row in `search_builds`.
3. The serving subset is copied into `search-<id>.duckdb.tmp` (readers never look at
   `.tmp` names) with each vector's sketch, not the vector; the FTS index is built by the
   dbt macro, metadata written, CHECKPOINT; then the arrays are written from that file
   into `search-<id>.arrays.tmp/`, the vectors streamed from state straight into theirs.
4. Great Expectations validates the file and its arrays in a fresh process that opens
   them read-only.
5. Rename the arrays folder to `search-<id>.arrays`, then the file to
   `search-<id>.duckdb`, chmod 0444, sha256 of each, manifest written atomically
   (publish refuses a file without a matching manifest), status `validated`. A build
   that fails at any step removes what it wrote, under either name, and is recorded
   failed; one killed is cleaned up by the next build or publish (step 1).
"""

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from slackquery import __version__, interrupts, projection
from slackquery.artifacts import (
    arrays,
    files,
    fts,
    history,
    inputs,
    retention,
    schema,
    validate,
)
from slackquery.crash import crash_point
from slackquery.duckdb_setup import open_database, wal_file
from slackquery.embedding import current
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.settings import Settings


@dataclass(frozen=True)
class Copy:
    """One artifact table filled from one dbt mart of the state database."""

    table: str
    mart: str
    order_by: str
    where: str = "true"
    # Artifact column -> the mart's name for it, where they differ.
    renames: tuple[tuple[str, str], ...] = ()

    def mart_columns(self) -> list[str]:
        """The mart's names for the artifact table's columns, in artifact column order."""
        renamed = dict(self.renames)
        return [
            renamed.get(column.name, column.name) for column in schema.TABLE_COLUMNS[self.table]
        ]

    def insert_sql(self) -> str:
        """`insert` of the mart's rows into `candidate.<table>`, in artifact column order."""
        select = ", ".join(self.mart_columns())
        return (
            f"insert into candidate.{self.table} select {select} from main.{self.mart} "
            f"where {self.where} order by {self.order_by}"
        )


# The artifact tables copied from the projection's marts as they are (vectors aside).
COPIES = (
    Copy("search_documents", "search_documents", "document_id", where="is_active"),
    Copy("workspaces", "search_workspaces", "workspace_id"),
    Copy(
        "channels",
        "search_channels",
        "workspace_id, channel_id",
        renames=(("message_count", "count_messages"),),
    ),
    Copy("users", "search_users", "workspace_id, user_id", where="is_author"),
    Copy("channel_members", "search_channel_members", "workspace_id, channel_id, user_id"),
    Copy(
        "limited_accounts",
        "search_users",
        "workspace_id, user_id",
        where="account_limit is not null",
    ),
)
COPIED_MARTS = tuple(dict.fromkeys(copy.mart for copy in COPIES))
# The generation's current vectors, read twice by a build: in SQL for their sketches,
# then streamed into the arrays' matrix. `artifact_vector_rows` is made by
# `write_candidate`.
VECTORS_SQL = """
select artifact_vector_rows.document_id, vectors.embedding::float[{dimension}] as embedding
from main.embedding_work_items as vectors
inner join artifact_vector_rows on vectors.rowid = artifact_vector_rows.work_row
"""


def check_mart_columns(conn: duckdb.DuckDBPyConnection) -> None:
    """Every column a build copies is in its mart: a model edit that renamed or dropped one
    is one line naming it, not DuckDB's binder error halfway through a build."""
    for copy in COPIES:
        present = {
            name
            for (name,) in conn.execute(
                "select column_name from duckdb_columns() "
                "where schema_name = 'main' and table_name = ?",
                [copy.mart],
            ).fetchall()
        }
        missing = [name for name in copy.mart_columns() if name not in present]
        if missing:
            raise SlackqueryError(
                f"the dbt model {copy.mart} has no column {', '.join(missing)}, which the "
                "search artifact copies (slackquery/artifacts/schema.py): restore it in the "
                "model, or change the artifact schema and serving with it"
            )


def code_version() -> str:
    """Package version plus the git commit when running from a checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=projection.PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}" if commit else __version__


def new_build_id(watermark: str, at: datetime | None = None) -> str:
    """`YYYYmmddTHHMMSSZ-<watermark[:8]>-<uuid4 hex[:8]>`: sortable by time, unique."""
    moment = (at or datetime.now(UTC)).astimezone(UTC)
    return f"{moment.strftime(files.BUILD_TIME_FORMAT)}-{watermark[:8]}-{uuid.uuid4().hex[:8]}"


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def write_candidate(
    conn: duckdb.DuckDBPyConnection, path: Path, generation: inputs.Generation
) -> None:
    """Copy the serving subset from state (`conn`) into a new DuckDB file at `path`."""
    tables = schema.TABLE_COLUMNS
    conn.execute(f"attach {_sql_string(str(path))} as candidate")
    try:
        for table, key in (
            # Serving looks documents up by id; the key's index is small next to the text.
            ("search_documents", "document_id"),
            # Uniqueness is checked by validation.
            ("document_vectors", None),
            ("workspaces", None),
            ("channels", None),
            ("users", None),
            ("channel_members", None),
            ("limited_accounts", None),
            ("artifact_metadata", None),
        ):
            conn.execute(schema.create_table_sql("candidate", table, tables[table], key))
        for copy in COPIES:
            _copy_mart(conn, copy)
        if generation.in_state:
            _insert_vector_sketches(conn, generation)
    finally:
        conn.execute("detach candidate")


# What a mart whose columns changed type raises when copied (`check_mart_columns` checks
# only their names: only search_documents has an enforced dbt contract).
_MART_MISMATCH = (
    duckdb.BinderException,
    duckdb.ConstraintException,
    duckdb.ConversionException,
    duckdb.TypeMismatchException,
)


def _copy_mart(conn: duckdb.DuckDBPyConnection, copy: Copy) -> None:
    """Insert one mart's rows into the candidate, or one line naming the mart that does
    not fit its artifact table."""
    try:
        conn.execute(copy.insert_sql())
    except _MART_MISMATCH as error:
        differ = _type_differences(conn, copy)
        raise SlackqueryError(
            f"the dbt model {copy.mart} does not fit the artifact table {copy.table} "
            f"(slackquery/artifacts/schema.py): {str(error).splitlines()[0]}"
            + (f"; columns whose types differ: {', '.join(differ)}" if differ else "")
        ) from error


def _type_differences(conn: duckdb.DuckDBPyConnection, copy: Copy) -> list[str]:
    """`column (TYPE in the model, TYPE in the artifact)` for each copied column whose
    types differ: DuckDB's cast error names the types, not the column."""
    types = {
        (database, table, column): data_type
        for database, table, column, data_type in conn.execute(
            "select database_name, table_name, column_name, data_type from duckdb_columns() "
            "where schema_name = 'main' and table_name in (?, ?)",
            [copy.mart, copy.table],
        ).fetchall()
    }
    (state,) = conn.execute("select current_database()").fetchone() or ("",)
    pairs = zip(copy.mart_columns(), schema.TABLE_COLUMNS[copy.table], strict=True)
    return [
        f"{name} ({model_type} in the model, {artifact_type} in the artifact)"
        for name, column in pairs
        if (model_type := types.get((state, copy.mart, name)))
        != (artifact_type := types.get(("candidate", copy.table, column.name)))
    ]


def _insert_vector_sketches(conn: duckdb.DuckDBPyConnection, generation: inputs.Generation) -> None:
    """Note the generation's current vectors, then insert each one's document and sketch
    into the attached `candidate`."""
    # The rows to read, ids only, so no hash table ever holds the vectors themselves:
    # the vectors are then one scan probing this small exact table. A single join lets
    # DuckDB's filter estimates pick the vector side as the build side, and sorting the
    # vectors by id would spill; the arrays are written in id order by position instead.
    conn.execute(
        f"""
        create or replace temp table artifact_vector_rows as
        select work_row, document_id from ({current.CURRENT_VECTORS}) as current_vectors
        """,
        {"generation_id": generation.generation_id},
    )
    dimension = generation.stored_dimension
    probes = schema.sketch_probes(dimension)
    products = ", ".join(
        f"array_inner_product(embedding, $probe_{index}::float[{dimension}])"
        for index in range(len(probes))
    )
    conn.execute(
        f"""
        insert into candidate.document_vectors
        select document_id, [{products}]::float[{schema.SKETCH_PROBES}]
        from ({VECTORS_SQL.format(dimension=dimension)}) as current_vectors
        """,
        {f"probe_{index}": probe.tolist() for index, probe in enumerate(probes)},
    )


def current_vectors(
    conn: duckdb.DuckDBPyConnection, generation: inputs.Generation
) -> duckdb.DuckDBPyConnection | None:
    """The vectors `write_candidate` sketched, as a running query of `(document_id,
    embedding)` rows on `conn` (None for a generation with no vectors in state)."""
    if not generation.in_state:
        return None
    return conn.execute(VECTORS_SQL.format(dimension=generation.stored_dimension))


def seal_candidate(
    path: Path,
    *,
    build_id: str,
    generation: inputs.Generation,
    watermark: str,
    version: str,
) -> dict[str, Any]:
    """Record metadata (incl. the FTS configuration read back from the index), CHECKPOINT."""
    conn = open_database(str(path))
    try:
        fts_config = fts.read_config(conn)
        row = conn.execute(
            """
            select
                count(*),
                count(*) filter (where document_kind = 'message'),
                count(*) filter (where document_kind = 'thread_context'),
                (select count(*) from document_vectors)
            from search_documents
            """
        ).fetchone()
        assert row is not None
        counts = {
            "document_count": int(row[0]),
            "message_count": int(row[1]),
            "thread_context_count": int(row[2]),
            "vector_count": int(row[3]),
        }
        coverage = schema.vector_coverage(counts["vector_count"], counts["message_count"])
        built_at = history.now()
        conn.execute(
            "insert into artifact_metadata values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                build_id,
                schema.SCHEMA_VERSION,
                generation.generation_id,
                json.dumps(generation.identity, sort_keys=True),
                watermark,
                counts["document_count"],
                counts["message_count"],
                counts["thread_context_count"],
                counts["vector_count"],
                coverage,
                json.dumps(fts_config, sort_keys=True),
                version,
                built_at,
            ],
        )
        conn.execute("checkpoint")
    finally:
        conn.close()
    return {
        "counts": counts,
        "vector_coverage": coverage,
        "fts_config": fts_config,
        "built_at": built_at.isoformat(),
    }


def remove_candidate(artifact_dir: Path, build_id: str) -> None:
    """Delete what a failed build wrote of its artifact under either name: the temp file,
    the DuckDB log a failed write leaves beside it and the temp arrays, or, once `finalize`
    renamed them, the final file, arrays and manifest (a failure there, say a full disk
    while writing the manifest, must not leave what looks like a rollback target)."""
    temp = files.temp_file(artifact_dir, build_id)
    final = files.artifact_file(artifact_dir, build_id)
    for path in (
        temp,
        wal_file(temp),
        final,
        files.manifest_file(artifact_dir, build_id),
    ):
        path.unlink(missing_ok=True)
    for artifact in (temp, final):
        arrays.remove(files.arrays_dir_of(artifact))


def finalize(temp: Path, final: Path) -> str:
    """Rename the validated temp arrays folder and file to their final names (the folder
    first: a final-named file always has its arrays), make them read-only, checksum the
    file."""
    final_arrays = files.arrays_dir_of(final)
    os.replace(files.arrays_dir_of(temp), final_arrays)
    os.replace(temp, final)
    files.fsync_dir(final.parent)
    crash_point("after_rename")
    for path in (final, *final_arrays.iterdir()):
        path.chmod(files.READ_ONLY)
    return files.sha256_file(final)


def manifest_for(
    build_id: str,
    final: Path,
    checksum: str,
    sealed: dict[str, Any],
    generation: inputs.Generation,
    watermark: str,
    version: str,
) -> dict[str, Any]:
    """The manifest beside an artifact: enough to re-check it and its arrays without
    opening them."""
    return {
        "build_id": build_id,
        "artifact_file": final.name,
        "schema_version": schema.SCHEMA_VERSION,
        "checksum_sha256": checksum,
        "size_bytes": final.stat().st_size,
        "generation_id": generation.generation_id,
        "generation": generation.identity,
        "source_watermark": watermark,
        "counts": sealed["counts"],
        "vector_coverage": sealed["vector_coverage"],
        "fts_config": sealed["fts_config"],
        "arrays": arrays.describe(files.arrays_dir_of(final)),
        "built_at": sealed["built_at"],
        "code_version": version,
        "validation": {
            "success": True,
            "result_file": files.validation_file(final.parent, build_id).name,
        },
    }


def _no_step(step: str) -> None:
    """What a caller that shows no progress passes for `step`."""


def build_artifact(settings: Settings, step: Callable[[str], None] = _no_step) -> str:
    """Build, validate and seal a new artifact from state; return its build id. `step` is
    told each step's name as it starts (`slackquery build` shows it on a terminal).

    Raises SlackqueryError (and records a failed build) when fewer messages than
    `artifact_min_vector_coverage` have a vector, or validation fails. The published
    artifact is never touched.
    """
    state_path = settings.state_path
    if not state_path.exists():
        raise SlackqueryError(f"no state database at {state_path}: run `slackquery project` first")
    artifact_dir = settings.artifact_path
    make_folder(artifact_dir)
    with files.artifact_lock(artifact_dir, files.holder_name("a build")):
        conn = open_database(str(state_path), what="state database")
        try:
            conn.execute("set memory_limit = ?", [settings.artifact_build_memory_limit])
            spill = settings.home / "tmp" / "duckdb"
            make_folder(spill)  # DuckDB creates the last level only
            conn.execute("set temp_directory = ?", [str(spill)])
            conn.execute("set enable_progress_bar = false")
            history.ensure_table(conn)
            history.mark_interrupted(conn)
            step("checking its inputs")
            retention.remove_leftovers(conn, artifact_dir)
            watermark = inputs.source_watermark(conn, COPIED_MARTS)
            check_mart_columns(conn)
            generation = inputs.current_generation(settings, conn)
            inputs.check_coverage(
                conn,
                generation,
                settings.artifact_min_vector_coverage,
                settings.artifact_max_rejected_share,
            )
            version = code_version()
            build_id = new_build_id(watermark)
            temp = files.temp_file(artifact_dir, build_id)
            final = files.artifact_file(artifact_dir, build_id)
            result_path = files.validation_file(artifact_dir, build_id)
            history.insert_building(
                conn,
                build_id=build_id,
                source_watermark=watermark,
                generation_id=generation.generation_id,
                artifact_path=str(final),
                code_version=version,
            )
            try:
                step("copying the search tables")
                write_candidate(conn, temp, generation)
                step("building the full-text index (dbt)")
                fts.build_index(settings, temp)
                step("sealing the tables")
                sealed = seal_candidate(
                    temp,
                    build_id=build_id,
                    generation=generation,
                    watermark=watermark,
                    version=version,
                )
                step("writing the arrays")
                arrays.write_arrays(
                    temp,
                    files.arrays_dir_of(temp),
                    settings.artifact_build_memory_limit,
                    generation.stored_dimension,
                    lambda: current_vectors(conn, generation),
                )
                crash_point("after_tmp_write")
                step("validating (Great Expectations)")
                result = validate.run_checkpoint(settings, temp, result_path)
                if not result["success"]:
                    message = validate.failure_summary(result)
                    history.mark_failed(
                        conn, build_id, message, validation=result, counts=sealed["counts"]
                    )
                    raise validate.ValidationFailed(
                        f"build {build_id} {message} (details: {result_path})"
                    )
                step("checksumming")
                checksum = finalize(temp, final)
                manifest = manifest_for(
                    build_id, final, checksum, sealed, generation, watermark, version
                )
                # Read-only like the files it seals: publish trusts a manifest whose
                # checksums match, so it must not be easier to rewrite than they are.
                files.write_json_atomic(
                    files.manifest_file(artifact_dir, build_id), manifest, mode=files.READ_ONLY
                )
                history.mark_validated(
                    conn,
                    build_id,
                    artifact_path=str(final),
                    checksum=checksum,
                    counts=sealed["counts"],
                    validation=result,
                )
            except BaseException as raised:
                remove_candidate(artifact_dir, build_id)
                error = interrupts.stop_behind(raised) or raised
                if not isinstance(error, Exception):
                    history.mark_stopped(conn, build_id, error)
                elif not isinstance(error, validate.ValidationFailed):
                    history.mark_failed(conn, build_id, f"{type(error).__name__}: {error}")
                raise
            return build_id
        finally:
            conn.close()
