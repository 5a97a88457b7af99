"""File primitives the artifact lifecycle relies on: locks, atomic writes, checksums, names.

Everything here exists so that a process killed at any instant leaves either the old
state or the new one on disk, never a half-written file under a name readers trust.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder

ARTIFACT_PREFIX = "search-"
ARTIFACT_SUFFIX = ".duckdb"
TEMP_SUFFIX = ".duckdb.tmp"
# The folder of memory-mappable vector arrays beside each artifact file (arrays.py).
ARRAYS_SUFFIX = ".arrays"
TEMP_ARRAYS_SUFFIX = ".arrays.tmp"
MANIFEST_SUFFIX = ".manifest.json"
VALIDATION_SUFFIX = ".validation.json"
# A publish's own checkpoint run that failed: kept apart, so the build's passing result
# (what a later publish may reuse) is never overwritten by it.
REFUSED_VALIDATION_SUFFIX = ".refused" + VALIDATION_SUFFIX
CURRENT_NAME = "current.duckdb"
LOCK_NAME = ".artifacts.lock"
# In the home: held by each reconcile run, and by a backup to keep reconcile out.
RECONCILE_LOCK_NAME = "reconcile.lock"
# Matched whole (`fullmatch`): `$` would also accept a trailing newline. ASCII digits only.
# A build id starts with the UTC time its build started, in this form.
BUILD_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
BUILD_ID_PATTERN = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}-[0-9a-f]{8}")
# A sealed artifact's file, arrays, manifest and validation result: r--r--r--.
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


def is_build_id(value: str) -> bool:
    """Whether `value` has the build id shape `YYYYmmddTHHMMSSZ-<hex8>-<hex8>`."""
    return bool(BUILD_ID_PATTERN.fullmatch(value))


def build_time(build_id: str) -> datetime | None:
    """When the build `build_id` started (its leading UTC time), or None for another shape."""
    if not is_build_id(build_id):
        return None
    return datetime.strptime(build_id[:16], BUILD_TIME_FORMAT).replace(tzinfo=UTC)


def artifact_file(artifact_dir: Path, build_id: str) -> Path:
    """Final (published-able) path of a build's artifact."""
    return artifact_dir / f"{ARTIFACT_PREFIX}{build_id}{ARTIFACT_SUFFIX}"


def temp_file(artifact_dir: Path, build_id: str) -> Path:
    """Path a build writes before validation; never opened by readers."""
    return artifact_dir / f"{ARTIFACT_PREFIX}{build_id}{TEMP_SUFFIX}"


def arrays_dir_of(artifact: Path) -> Path:
    """The arrays folder that belongs with an artifact file: a temp file's is a temp folder.

    Readers, validation and the seal check all find the arrays through this one rule, so a
    candidate is validated with exactly the arrays that are renamed alongside it.
    """
    name = artifact.name
    if name.endswith(TEMP_SUFFIX):
        return artifact.with_name(name.removesuffix(TEMP_SUFFIX) + TEMP_ARRAYS_SUFFIX)
    if name.endswith(ARTIFACT_SUFFIX):
        return artifact.with_name(name.removesuffix(ARTIFACT_SUFFIX) + ARRAYS_SUFFIX)
    raise SlackqueryError(f"{artifact.name} is not an artifact file name; it has no arrays")


def manifest_file(artifact_dir: Path, build_id: str) -> Path:
    """The manifest beside an artifact."""
    return artifact_dir / f"{ARTIFACT_PREFIX}{build_id}{MANIFEST_SUFFIX}"


def validation_file(artifact_dir: Path, build_id: str) -> Path:
    """The Great Expectations result kept beside a build (passed or failed)."""
    return artifact_dir / f"{ARTIFACT_PREFIX}{build_id}{VALIDATION_SUFFIX}"


def refused_validation_file(artifact_dir: Path, build_id: str) -> Path:
    """Where a publish or rollback keeps the checkpoint result that refused the build."""
    return artifact_dir / f"{ARTIFACT_PREFIX}{build_id}{REFUSED_VALIDATION_SUFFIX}"


def build_id_of(path: Path) -> str | None:
    """The build id a final artifact file name carries, or None for any other file."""
    name = path.name
    if not (name.startswith(ARTIFACT_PREFIX) and name.endswith(ARTIFACT_SUFFIX)):
        return None
    candidate = name[len(ARTIFACT_PREFIX) : -len(ARTIFACT_SUFFIX)]
    return candidate if is_build_id(candidate) else None


def build_id_in(name: str) -> str | None:
    """The build id any `search-<build_id>.<suffix>` name carries (the file, its arrays,
    manifest, validation results, temp names), or None."""
    if not name.startswith(ARTIFACT_PREFIX):
        return None
    candidate = name[len(ARTIFACT_PREFIX) :].split(".", 1)[0]
    return candidate if is_build_id(candidate) else None


def fsync_dir(directory: Path) -> None:
    """Make renames and new names in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: Any, mode: int | None = None) -> None:
    """Write JSON to a temp name, fsync, rename over `path`, fsync the folder. `mode`, when
    given, is set before the rename, so `path` never exists with other permissions."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with temp.open("w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str, ensure_ascii=False)
        handle.write("\n")
        handle.flush()
        if mode is not None:
            os.fchmod(handle.fileno(), mode)
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


def read_json(path: Path) -> Any:
    """Read a JSON file written by `write_json_atomic`."""
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


def sha256_file(path: Path, block_size: int = 8 * 1024 * 1024) -> str:
    """Hex sha256 of a file, read in blocks so a multi-GiB artifact costs no memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
    return digest.hexdigest()


def require_checksum(path: Path, expected: object, label: str) -> None:
    """Raise unless the sha256 of `path` is `expected` (a manifest's record of it)."""
    checksum = sha256_file(path)
    if checksum != expected:
        raise SlackqueryError(
            f"checksum mismatch for {label}: file {checksum[:12]}…, manifest {str(expected)[:12]}…"
        )


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, holder: str | None = None) -> Iterator[None]:
    """Hold an exclusive `flock` on `path`; fail at once if another process holds it,
    naming it as `what` (`another import or sync`), or as the holder that wrote its own
    name into the file (`a backup (PID 7)`: it takes other commands' locks).

    The kernel drops a flock when its process dies, so a crashed run never blocks the next;
    each holder rewrites the name, so one a killed holder left is gone with its lock.
    """
    make_folder(path.parent)
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            handle.seek(0)
            named = handle.read().strip()
            running = f"{named} is running" if named else f"{what} is already running"
            raise SlackqueryError(f"{running} (lock held on {path})") from error
        handle.truncate(0)
        handle.write(holder or "")
        handle.flush()
        yield
    finally:
        handle.close()


# The PID in a `holder_name`.
_HOLDER_PID = re.compile(r"\(PID (\d+)\)")
# How a pipeline lock's holder that wrote no name of its own is called.
_UNNAMED_PIPELINE_HOLDER = "another reconcile"


def holder_name(what: str) -> str:
    """How this process names itself in a lock it takes (`exclusive_lock`'s `holder`), for
    those it refuses: `a sync (PID 7) is running`."""
    return f"{what} (PID {os.getpid()})"


def holder_pid(name: str) -> int | None:
    """The PID in a `holder_name`; None in a name without one."""
    found = _HOLDER_PID.search(name)
    return int(found[1]) if found else None


def pipeline_lock(home: Path, holder: str | None = None) -> contextlib.AbstractContextManager[None]:
    """The lock held by each reconcile run, backup and command that writes the state
    database or the artifacts (`commands.writes_the_pipeline`): one of them meeting another
    halfway failed it (a publish waiting on the state database held the artifact lock when
    a reconcile came to build), and a reader between two of their steps could fail the
    next (dbt opens the state database once, without waiting)."""
    return exclusive_lock(home / RECONCILE_LOCK_NAME, _UNNAMED_PIPELINE_HOLDER, holder)


def pipeline_holder(home: Path) -> str | None:
    """Who holds the `pipeline_lock` now, as it named itself (`a reconcile (PID 7)`); None
    when no one does. A reader checks it before opening the state database: it then stays
    out of a writer's way. (The check takes the lock shared for an instant.)"""
    path = home / RECONCILE_LOCK_NAME
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or _UNNAMED_PIPELINE_HOLDER
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return None


def artifact_lock(
    artifact_dir: Path, holder: str | None = None
) -> contextlib.AbstractContextManager[None]:
    """The lock every build, publish, rollback and retention run holds in the artifact dir."""
    return exclusive_lock(artifact_dir / LOCK_NAME, "another artifact build or publish", holder)
