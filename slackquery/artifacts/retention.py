"""Retention: which artifacts stay on disk.

Kept: the current artifact, the `retain_artifacts` newest others, and anything younger
than `retention_min_age_s` (a reader may have just resolved it). Deleted: the rest with
their arrays folders, manifests and validation results, plus leftovers of dead runs
(`.tmp` files and folders, temp pointer links). A serving process that still maps a
deleted artifact's arrays keeps reading them: POSIX keeps unlinked files while mapped.
Run only under the artifact lock, which every build holds, so a `.tmp` seen here can
never belong to a running build.
"""

import time
from pathlib import Path
from typing import Any

from slackquery.artifacts import arrays, files
from slackquery.artifacts.pointer import TEMP_LINK_PREFIX, current_target
from slackquery.settings import Settings


def _sidecars(artifact_dir: Path, build_id: str) -> list[Path]:
    return [
        files.manifest_file(artifact_dir, build_id),
        files.validation_file(artifact_dir, build_id),
    ]


def apply_retention(settings: Settings, *, now: float | None = None) -> dict[str, Any]:
    """Delete what the policy does not keep; return what was kept and removed.

    The caller must hold the artifact lock.
    """
    artifact_dir = settings.artifact_path
    moment = time.time() if now is None else now
    current = current_target(artifact_dir)
    artifacts = sorted(
        (
            path
            for path in artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.ARTIFACT_SUFFIX}")
            if files.build_id_of(path) and not path.is_symlink()
        ),
        key=lambda path: files.build_id_of(path) or "",
        reverse=True,
    )
    others = [path for path in artifacts if path.name != current]
    newest = {path.name for path in others[: settings.retain_artifacts]}
    kept, removed = [], []
    for path in artifacts:
        young = moment - path.stat().st_mtime < settings.retention_min_age_s
        if path.name == current or path.name in newest or young:
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
            build_id = sidecar.name[len(files.ARTIFACT_PREFIX) :].split(".", 1)[0]
            old = moment - sidecar.stat().st_mtime >= settings.retention_min_age_s
            if build_id not in kept_ids and old:
                if sidecar.is_dir():
                    arrays.remove(sidecar)
                else:
                    sidecar.unlink(missing_ok=True)
                removed.append(sidecar.name)
    for folder in artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.TEMP_ARRAYS_SUFFIX}"):
        arrays.remove(folder)
        removed.append(folder.name)
    for leftover in [
        *artifact_dir.glob(f"{files.ARTIFACT_PREFIX}*{files.TEMP_SUFFIX}"),
        *artifact_dir.glob(f"{TEMP_LINK_PREFIX}*"),
        *artifact_dir.glob(f".{files.ARTIFACT_PREFIX}*.tmp"),
    ]:
        leftover.unlink(missing_ok=True)
        removed.append(leftover.name)
    if removed:
        files.fsync_dir(artifact_dir)
    return {"kept": kept, "removed": removed}
