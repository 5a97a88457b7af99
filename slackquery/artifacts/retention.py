"""Retention: which artifacts stay on disk.

Kept: the current artifact, the one published just before it (the natural rollback
target), the `retain_artifacts` newest other sealed ones (with a manifest), and anything
younger than `retention_min_age_s` (a reader may have just resolved it). Deleted: the rest
with their arrays folders, manifests and validation results, plus leftovers of dead runs
(`remove_leftovers`). A serving process that still maps a deleted artifact's arrays keeps
reading them: POSIX keeps unlinked files while mapped. Run only under the artifact lock,
which every build holds, so a leftover seen here can never belong to a running build.
"""

import time
from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts import arrays, files, history
from slackquery.artifacts.pointer import TEMP_LINK_PREFIX, current_target
from slackquery.settings import Settings


def _sidecars(artifact_dir: Path, build_id: str) -> list[Path]:
    return [
        files.manifest_file(artifact_dir, build_id),
        files.validation_file(artifact_dir, build_id),
        files.refused_validation_file(artifact_dir, build_id),
    ]


def _remove_unsealed(conn: duckdb.DuckDBPyConnection, artifact_dir: Path) -> list[str]:
    """Delete the final-named file and arrays of every build that never sealed them.

    A build renames its file and arrays before it writes their manifest, so one killed in
    between leaves final names without a manifest: never publishable, yet they look like a
    rollback target. They go when the history does not record the build sealed either
    (failed, interrupted, or absent); a build it records sealed keeps its files.
    """
    sealed = history.sealed_build_ids(conn)
    current = current_target(artifact_dir)
    unsealed = {
        build_id
        for path in artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*")
        if (build_id := files.build_id_in(path.name))
        and build_id not in sealed
        and not files.manifest_file(artifact_dir, build_id).exists()
        and files.artifact_file(artifact_dir, build_id).name != current
    }
    removed = []
    for build_id in sorted(unsealed):
        artifact = files.artifact_file(artifact_dir, build_id)
        folder = files.arrays_dir_of(artifact)
        if artifact.is_file() and not artifact.is_symlink():
            artifact.unlink()
            removed.append(artifact.name)
        if folder.is_dir() and not folder.is_symlink():
            arrays.remove(folder)
            removed.append(folder.name)
    return removed


def remove_leftovers(conn: duckdb.DuckDBPyConnection, artifact_dir: Path) -> list[str]:
    """Delete what dead runs left: `.tmp` files and folders, temp pointer links and JSON
    files, and unsealed builds' files (`_remove_unsealed`). Call only under the artifact lock."""
    removed = _remove_unsealed(conn, artifact_dir)
    for folder in artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.TEMP_ARRAYS_SUFFIX}"):
        arrays.remove(folder)
        removed.append(folder.name)
    for leftover in [
        # The temp file and the DuckDB log a write that failed may leave beside it.
        *artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.TEMP_SUFFIX}*"),
        *artifact_dir.glob(f"{TEMP_LINK_PREFIX}*"),
        *artifact_dir.glob(f".{files.ARTIFACT_PREFIX}*.tmp"),
    ]:
        leftover.unlink(missing_ok=True)
        removed.append(leftover.name)
    return removed


def _kept_names(
    settings: Settings, conn: duckdb.DuckDBPyConnection, artifacts: list[Path]
) -> set[str]:
    """Names of the artifacts the policy keeps, whatever their age."""
    artifact_dir = settings.artifact_path
    current = current_target(artifact_dir)
    previous = history.previously_published(conn)
    # Only a sealed build can be rolled back to, so only those count towards the newest
    # (a build killed after its manifest but before the history recorded it is not one).
    sealed = history.sealed_build_ids(conn)
    sealed_others = [
        path
        for path in artifacts
        if path.name != current
        and (build_id := files.build_id_of(path) or "") in sealed
        and files.manifest_file(artifact_dir, build_id).is_file()
    ]
    kept = {path.name for path in sealed_others[: settings.retain_artifacts]}
    if current:
        kept.add(current)
    if previous:
        kept.add(files.artifact_file(artifact_dir, previous).name)
    return kept


def apply_retention(
    settings: Settings, conn: duckdb.DuckDBPyConnection, *, now: float | None = None
) -> dict[str, Any]:
    """Delete what the policy does not keep; return what was kept and removed.

    `conn` is the state database (the build history). The caller must hold the artifact lock.
    """
    artifact_dir = settings.artifact_path
    removed = remove_leftovers(conn, artifact_dir)
    moment = time.time() if now is None else now
    artifacts = sorted(
        (
            path
            for path in artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.ARTIFACT_SUFFIX}")
            if files.build_id_of(path) and not path.is_symlink()
        ),
        key=lambda path: files.build_id_of(path) or "",
        reverse=True,
    )
    policy = _kept_names(settings, conn, artifacts)
    kept = []
    for path in artifacts:
        young = moment - path.stat().st_mtime < settings.retention_min_age_s
        if path.name in policy or young:
            kept.append(path.name)
            continue
        build_id = files.build_id_of(path) or ""
        path.unlink(missing_ok=True)
        for sidecar in _sidecars(artifact_dir, build_id):
            sidecar.unlink(missing_ok=True)
        arrays.remove(files.arrays_dir_of(path))
        removed.append(path.name)
    kept_ids = {files.build_id_of(artifact_dir / name) for name in kept}
    for pattern in (
        f"{files.ARTIFACT_PREFIX}*{files.MANIFEST_SUFFIX}",
        f"{files.ARTIFACT_PREFIX}*{files.VALIDATION_SUFFIX}",
        f"{files.ARTIFACT_PREFIX}*{files.ARRAYS_SUFFIX}",
    ):
        for sidecar in artifact_dir.glob(pattern):
            old = moment - sidecar.stat().st_mtime >= settings.retention_min_age_s
            if files.build_id_in(sidecar.name) not in kept_ids and old:
                if sidecar.is_dir():
                    arrays.remove(sidecar)
                else:
                    sidecar.unlink(missing_ok=True)
                removed.append(sidecar.name)
    if removed:
        files.fsync_dir(artifact_dir)
    return {"kept": kept, "removed": removed}
