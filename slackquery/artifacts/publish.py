"""Publish and roll back: make a sealed artifact `current`, record it, apply retention.

`publish` accepts a build that a build run validated; `rollback` a retained older one.
Both re-check the seal (manifest, sha256, metadata) before the pointer moves, and run the
full GX checkpoint in a fresh read-only process again unless the build's passing result
still holds (`validate.reusable_result`: same bytes, same published artifact compared
against, same checks); a rollback always runs it. Both refuse anything that is not a
sealed artifact directly inside the artifact directory.
"""

from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts import files, history, validate
from slackquery.artifacts.pointer import current_artifact, current_target, swap_current
from slackquery.artifacts.retention import apply_retention
from slackquery.crash import crash_point
from slackquery.duckdb_setup import connect
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

__all__ = ["current_artifact", "publish", "rollback", "sync_history"]

PUBLISHABLE = ("validated", "published", "superseded")
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


def _open_state(settings: Settings) -> duckdb.DuckDBPyConnection:
    if not settings.state_path.exists():
        raise SlackqueryError(f"no state database at {settings.state_path}")
    conn = connect(str(settings.state_path), what="state database")
    history.ensure_table(conn)
    return conn


def _publish(settings: Settings, reference: str, *, is_rollback: bool) -> dict[str, Any]:
    artifact_dir = settings.artifact_path.resolve()
    artifact_dir.mkdir(parents=True, exist_ok=True)
    with files.artifact_lock(artifact_dir):
        conn = _open_state(settings)
        try:
            if reference == LATEST:
                reference = history.latest_validated(conn)
            build_id, path = validate.resolve_artifact(settings, reference)
            sync_history(conn, artifact_dir)
            row = history.get_build(conn, build_id)
            if row is None:
                raise SlackqueryError(f"build {build_id} is not in the build history")
            if row["status"] not in PUBLISHABLE:
                raise SlackqueryError(f"build {build_id} is {row['status']}; not publishable")
            manifest = validate.verify_sealed(artifact_dir, build_id, path)
            result_path = files.validation_file(artifact_dir, build_id)
            reused = None if is_rollback else validate.reusable_result(settings, path, result_path)
            # A rollback is a deliberate step back, so it skips the count-drift check
            # against the artifact it replaces.
            validation = reused or validate.run_checkpoint(
                settings, path, result_path, compare_with_current=not is_rollback
            )
            if not validation["success"]:
                action = "rollback to" if is_rollback else "publish of"
                raise validate.ValidationFailed(
                    f"{action} {build_id} refused: {validate.failure_summary(validation)}"
                )
            previous = current_target(artifact_dir)
            swap_current(artifact_dir, path.name)
            crash_point("after_swap")
            history.mark_published(conn, build_id)
            retention = apply_retention(settings)
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
        "validation": {"success": validation["success"], "reused": reused is not None},
        "retention": retention,
    }


def publish(settings: Settings, build_id: str) -> dict[str, Any]:
    """Make a validated build (or `latest`) current once its validation holds; return a summary."""
    return _publish(settings, build_id, is_rollback=False)


def rollback(settings: Settings, reference: str) -> dict[str, Any]:
    """Republish a retained artifact (build id or path) after full GX validation."""
    return _publish(settings, reference, is_rollback=True)
