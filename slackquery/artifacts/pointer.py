"""The `current.duckdb` pointer: a relative symlink swapped atomically.

Readers resolve the link when they open a connection; a reader that already has the old
file open keeps reading it (the file is never modified, only unlinked later by
retention, which POSIX lets open handles survive).
"""

import os
import uuid
from pathlib import Path

from slackquery.artifacts import files
from slackquery.crash import crash_point
from slackquery.settings import Settings

TEMP_LINK_PREFIX = ".current.duckdb."
# What to do where nothing is published: `build` alone fails before `project` and `embed`.
PUBLISH_FIRST = (
    "run `slackquery reconcile` (after `slackquery import` or `sync`) to build and publish one"
)


def current_target(artifact_dir: Path) -> str | None:
    """File name `current.duckdb` points to, or None when there is no valid pointer."""
    link = artifact_dir / files.CURRENT_NAME
    try:
        target = os.readlink(link)
    except (FileNotFoundError, OSError):
        return None
    if "/" in target or files.build_id_of(Path(target)) is None:
        return None
    return target


def no_current_reason(artifact_dir: Path) -> str:
    """Why `current_target` found nothing: no pointer, or one that names no artifact of the
    folder (set by hand, or copied from elsewhere)."""
    link = artifact_dir / files.CURRENT_NAME
    if not link.is_symlink():
        return f"no published search artifact at {link}; {PUBLISH_FIRST}"
    return (
        f"the published pointer {link} names {os.readlink(link)!r}, not an artifact of its "
        "folder; `slackquery rollback <build id>` (see `slackquery artifacts`) or `slackquery "
        "reconcile` points it at one"
    )


def current_artifact(settings: Settings) -> Path | None:
    """Absolute path of the published artifact, or None when nothing is published."""
    artifact_dir = settings.artifact_path.resolve()
    target = current_target(artifact_dir)
    if target is None:
        return None
    path = artifact_dir / target
    return path if path.is_file() else None


def swap_current(artifact_dir: Path, target_name: str) -> None:
    """Point `current.duckdb` at `target_name`: temp symlink, `os.replace`, fsync the dir.

    `rename(2)` over the old link is atomic, so a reader resolves either the old or the
    new artifact, never a missing or half-made pointer.
    """
    temp = artifact_dir / f"{TEMP_LINK_PREFIX}{uuid.uuid4().hex}"
    os.symlink(target_name, temp)
    crash_point("before_swap")
    os.replace(temp, artifact_dir / files.CURRENT_NAME)
    files.fsync_dir(artifact_dir)
