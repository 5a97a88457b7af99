"""Publish and roll back: make a sealed artifact `current`, record it, apply retention.

`publish` accepts a build that a build run validated; `rollback` a retained older one.
Both re-check the seal (manifest, sha256, metadata, and the file's sha256 against the one
the build history recorded) before the pointer moves, and run the full GX checkpoint in a
fresh read-only process again unless the build's passing result still holds
(`validate.reusable_result`: same bytes, same published artifact compared against, same
checks); a rollback always runs it. A run that refuses the build is kept beside the
build's result (`search-<id>.refused.validation.json`), never over it, and a publish while
that refusal still holds (`validate.standing_refusal`) refuses again without running the
checkpoint: the hourly reconcile does not re-validate a build it cannot publish. Both refuse
anything that is not a sealed artifact directly inside the artifact directory.
"""

from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts import files, history, validate
from slackquery.artifacts.pointer import (
    PUBLISH_FIRST,
    current_artifact,
    current_target,
    swap_current,
)
from slackquery.artifacts.retention import apply_retention, remove_leftovers
from slackquery.crash import crash_point
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.settings import Settings

__all__ = ["current_artifact", "publish", "record_pointer", "rollback", "sync_history"]

PUBLISHABLE = history.SEALED
LATEST = "latest"  # publish reference meaning the newest validated build


def sync_history(conn: duckdb.DuckDBPyConnection, artifact_dir: Path) -> None:
    """Make `search_builds` agree with the pointer (a publish may have died after the swap)."""
    target = current_target(artifact_dir)
    build_id = files.build_id_of(Path(target)) if target else None
    if build_id is None:
        return
    row = history.get_build(conn, build_id)
    if row is not None and row["status"] != "published":
        history.mark_published(conn, build_id)


def record_pointer(settings: Settings) -> list[str]:
    """For a run that publishes nothing itself: under the artifact lock, `sync_history`,
    and what killed builds left is removed (as the next build or publish would: an
    unsealed build's files can be gigabytes, and new input may be days away). Returns
    the names removed."""
    artifact_dir = settings.artifact_path.resolve()
    with files.artifact_lock(artifact_dir):
        conn = _open_state(settings)
        try:
            history.mark_interrupted(conn)
            sync_history(conn, artifact_dir)
            return remove_leftovers(conn, artifact_dir)
        finally:
            conn.close()


def _open_state(settings: Settings) -> duckdb.DuckDBPyConnection:
    if not settings.state_path.exists():
        raise SlackqueryError(
            f"no state database at {settings.state_path}, so no build to publish: {PUBLISH_FIRST}"
        )
    conn = open_database(str(settings.state_path), what="state database")
    history.ensure_table(conn)
    return conn


def _require_publishable(row: dict[str, Any]) -> None:
    """Refuse a build the history records as failed, interrupted or still building."""
    if row["status"] not in PUBLISHABLE:
        raise SlackqueryError(
            f"build {row['build_id']} is {row['status']}; not publishable (only validated, "
            "published and superseded builds are: see `slackquery artifacts`)"
        )


def _sealed_manifest(
    conn: duckdb.DuckDBPyConnection, artifact_dir: Path, build_id: str, path: Path
) -> dict[str, Any]:
    """The manifest of a build that may be published, once its seal is checked."""
    row = history.get_build(conn, build_id)
    if row is None:
        raise SlackqueryError(f"build {build_id} is not in the build history")
    _require_publishable(row)
    manifest = validate.verify_sealed(artifact_dir, build_id, path)
    # The manifest proves the file is the one it describes; the history proves the
    # manifest is the one the build wrote (a file edited with its manifest is caught here).
    if manifest["checksum_sha256"] != row["checksum_sha256"]:
        raise SlackqueryError(
            f"refusing build {build_id}: its file and manifest are not the ones the build "
            f"sealed (sha256 {str(manifest['checksum_sha256'])[:12]}…, build history "
            f"{str(row['checksum_sha256'])[:12]}…)"
        )
    return manifest


def _validation(
    settings: Settings, artifact_dir: Path, build_id: str, path: Path, *, is_rollback: bool
) -> tuple[dict[str, Any], bool]:
    """The passing checkpoint result the build is published on, and whether it is the
    build's own result reused; raises ValidationFailed naming where the refusal is kept."""
    result_path = files.validation_file(artifact_dir, build_id)
    reused = None if is_rollback else validate.reusable_result(settings, path, result_path)
    if reused is not None:
        return reused, True
    refused_path = files.refused_validation_file(artifact_dir, build_id)
    standing = None if is_rollback else validate.standing_refusal(settings, path, refused_path)
    # A rollback is a deliberate step back, so it skips the count-drift check against the
    # artifact it replaces.
    validation = standing or validate.recheck(
        settings, path, result_path, refused_path, compare_with_current=not is_rollback
    )
    if not validation["success"]:
        action = "rollback to" if is_rollback else "publish of"
        again = " again (nothing it was checked against has changed)" if standing else ""
        raise validate.ValidationFailed(
            f"{action} {build_id} refused{again}: {validate.failure_summary(validation)} "
            f"(details: {refused_path})"
        )
    return validation, False


def _publish(settings: Settings, reference: str, *, is_rollback: bool) -> dict[str, Any]:
    artifact_dir = settings.artifact_path.resolve()
    make_folder(artifact_dir)
    holder = files.holder_name("a rollback" if is_rollback else "a publish")
    with files.artifact_lock(artifact_dir, holder):
        conn = _open_state(settings)
        try:
            history.mark_interrupted(conn)
            sync_history(conn, artifact_dir)
            if reference == LATEST:
                reference = history.latest_validated(conn)
            named = history.get_build(conn, reference)
            if named is not None:  # before its file is looked for: a failed build has none
                _require_publishable(named)
            build_id, path = validate.resolve_artifact(settings, reference)
            manifest = _sealed_manifest(conn, artifact_dir, build_id, path)
            validation, reused = _validation(
                settings, artifact_dir, build_id, path, is_rollback=is_rollback
            )
            previous = current_target(artifact_dir)
            swap_current(artifact_dir, path.name)
            crash_point("after_swap")
            history.mark_published(conn, build_id)
            retention = apply_retention(settings, conn)
        finally:
            conn.close()
    return {
        "build_id": build_id,
        "artifact": str(path),
        "previous": previous,
        "checksum_sha256": manifest["checksum_sha256"],
        "counts": manifest["counts"],
        "generation_id": manifest["generation_id"],
        "source_watermark": manifest["source_watermark"],
        "validation": {"success": validation["success"], "reused": reused},
        "retention": retention,
    }


def publish(settings: Settings, build_id: str) -> dict[str, Any]:
    """Make a validated build (or `latest`) current once its validation holds; return a summary."""
    return _publish(settings, build_id, is_rollback=False)


def rollback(settings: Settings, reference: str) -> dict[str, Any]:
    """Republish a retained artifact (build id or path) after full GX validation."""
    if reference == LATEST:
        raise SlackqueryError(
            "rollback needs the build id or artifact path to go back to (see `slackquery "
            "artifacts`); `latest` is a publish reference, the newest validated build"
        )
    return _publish(settings, reference, is_rollback=True)
