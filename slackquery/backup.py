"""`slackquery backup`: a consistent copy of a home, which is itself a home.

Copied is what cannot be made again without Slack or hours of embedding: the canonical
store, the state database (projection, vectors, build history), the grants and the cursor
key, and the published artifact with its seal, so the copy serves as it is
(`SLACKQUERY_HOME=COPY slackquery serve`). Derived folders (dbt, logs, model cache,
spill) and retained artifacts are left out: `reconcile` makes them again.

Consistency comes from the writers' own locks: while the copy is taken, the canonical
store's writer lock keeps `import` and `sync` out, the pipeline lock `reconcile` (which
leaves the state database closed between its steps), `project`, `embed`, `build`,
`publish` and `rollback`, the artifact lock any other builder, and each database is held
open read-only, which DuckDB's file lock refuses to any other writer. A writer already
running makes the backup fail at once, naming it. What the home lacks (a lost state
database, the published artifact's file) is named in the record, never passed over in
silence; so is what it holds damaged (a database DuckDB cannot read, an artifact that does
not match its seal), left out so that the rest is still copied. The copy is made beside
its destination and renamed into place when complete and checked, so a killed backup never
leaves a partial copy under the name asked for; the next backup into the same folder
removes what one killed outright (SIGKILL, power loss) left there.
"""

import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from slackquery import __version__
from slackquery.access.grants import grants_path
from slackquery.artifacts import files, validate
from slackquery.artifacts.pointer import current_artifact, current_target
from slackquery.canonical.store import writer_lock
from slackquery.commands import CURSOR_KEY_NAME
from slackquery.duckdb_setup import DamagedDatabase, open_database, wal_file
from slackquery.errors import SlackqueryError
from slackquery.folders import make_folder
from slackquery.settings import Settings

RECORD_NAME = "backup.json"
# A copy in the making is the folder `.DEST.<uuid4 hex>.tmp` beside DEST, with the lock
# file `.DEST.<uuid4 hex>.lock` its backup holds (locked before the folder exists).
_LEFTOVER = re.compile(r"(?P<copy>\..+\.[0-9a-f]{32})\.(?:tmp|lock)")


def back_up(
    settings: Settings, destination: Path, step: Callable[[str], None] = lambda _step: None
) -> dict[str, Any]:
    """Copy the home's irreplaceable parts into `destination` (a new folder); return the
    record written there as `backup.json`."""
    if destination.exists() or destination.is_symlink():
        raise SlackqueryError(f"{destination} exists; name a folder that does not")
    staging = destination.with_name(f".{destination.name}.{uuid.uuid4().hex}.tmp")
    with ExitStack() as held:
        damaged = _hold_writers_off(settings, held)
        try:
            make_folder(destination.parent)
        except OSError as error:  # a file or a dangling link in the way, a missing mount
            raise SlackqueryError(
                f"cannot make the folder {destination.parent}: {error.strerror}"
            ) from None
        removed = _remove_killed_copies(destination.parent)
        # Locked before the folder exists, so no other backup ever finds it unlocked; let go
        # once the folder is renamed or removed.
        held.enter_context(_locked(_lock_file(staging)))
        held.callback(_lock_file(staging).unlink, missing_ok=True)
        try:
            record = _copy_home(settings, make_folder(staging), step, removed, damaged)
            os.rename(staging, destination)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    files.fsync_dir(destination.parent)
    return record


def _lock_file(staging: Path) -> Path:
    """The lock file of a copy in the making (`.DEST.<hex>.lock`)."""
    return staging.with_suffix(".lock")


@contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold a `flock` on the file at `path` (made if missing): the kernel drops it when its
    process dies, which tells `_remove_killed_copies` which copies no backup is making. A
    regular file opened for writing, as NFS needs for an exclusive lock."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield
    finally:
        os.close(descriptor)


def _remove_killed_copies(parent: Path) -> list[str]:
    """Remove the partial copies in `parent` whose backup was killed (no process holds their
    lock), and their lock files; return the copies' names. A backup of another home into
    the same folder holds its lock; a copy this account may not remove is left alone."""
    removed = []
    copies = {
        found["copy"] for path in parent.iterdir() if (found := _LEFTOVER.fullmatch(path.name))
    }
    for copy in sorted(copies):
        folder, lock = parent / f"{copy}.tmp", parent / f"{copy}.lock"
        try:
            with _locked(lock, wait=False):
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder)
                    removed.append(folder.name)
                lock.unlink()
        except OSError:  # BlockingIOError: its backup is running
            continue
    return removed


def _hold_writers_off(settings: Settings, held: ExitStack) -> dict[Path, str]:
    """Take every writer's lock, or fail at once naming the writer that runs; return the
    databases whose bytes DuckDB cannot read, with what is wrong (no writer can open them
    either)."""
    if not (settings.canonical_path.is_file() or settings.state_path.is_file()):
        raise SlackqueryError(
            f"nothing to back up: no canonical store or state database in {settings.home}"
        )
    holder = files.holder_name("a backup")  # what the refused writers are told
    held.enter_context(writer_lock(settings, holder))
    if settings.home.is_dir():
        held.enter_context(files.pipeline_lock(settings.home, holder))
    if settings.artifact_path.is_dir():
        held.enter_context(files.artifact_lock(settings.artifact_path, holder))
    damaged = {}
    for database in _databases(settings):
        try:
            opened = open_database(str(database.path), read_only=True, what=database.what)
        except DamagedDatabase as damage:
            damaged[database.path] = damage.detail
        else:
            held.callback(opened.close)
    return damaged


class HomeDatabase(NamedTuple):
    """One database a home may have: its file, its name in a home, what it is, and what
    brings it back when its bytes are damaged."""

    path: Path
    name: str
    what: str
    if_damaged: str


def _all_databases(settings: Settings) -> list[HomeDatabase]:
    """Each database a home may have."""
    return [
        HomeDatabase(
            settings.canonical_path,
            "canonical.duckdb",
            "canonical store",
            "an earlier backup's copy, or `slackquery import` or `sync` into a fresh home, "
            "brings the canonical store back",
        ),
        HomeDatabase(
            settings.state_path,
            "state.duckdb",
            "state database",
            "`slackquery reconcile` in the backup projects the canonical store again and "
            "embeds every message again",
        ),
    ]


def _databases(settings: Settings) -> list[HomeDatabase]:
    """`_all_databases` this home has."""
    return [database for database in _all_databases(settings) if database.path.is_file()]


def _missing(settings: Settings) -> list[str]:
    """What a backup would hold that this home lacks (lost, or never made): the record says
    so, since the copy cannot bring it back."""
    missing = [
        f"the {database.what} ({database.path})"
        for database in _all_databases(settings)
        if not database.path.is_file()
    ]
    target = current_target(settings.artifact_path)
    if target is not None and current_artifact(settings) is None:
        missing.append(f"the published artifact {target} (`current.duckdb` points to it)")
    return missing


def _copy_home(
    settings: Settings,
    staging: Path,
    step: Callable[[str], None],
    removed: list[str],
    damaged: dict[Path, str],
) -> dict[str, Any]:
    """Copy each part into `staging`, check the artifact's seal there, write the record
    (with the killed backups' copies this one `removed` beside it). A `damaged` database is
    left out, and named, so that the rest is still backed up."""
    left_out = []
    for database in _databases(settings):
        source, copy = database.path, staging / database.name
        if source in damaged:
            left_out.append(
                f"the {database.what}, damaged ({damaged[source]}); {database.if_damaged}"
            )
            continue
        step(f"copying the {database.what}")
        _copy_if_present(source, copy)
        _copy_if_present(wal_file(source), wal_file(copy))
    _copy_if_present(grants_path(settings), staging / "access" / "grants.json")
    _copy_if_present(settings.home / CURSOR_KEY_NAME, staging / CURSOR_KEY_NAME)
    build_id, artifact_left_out = _copy_published(settings, staging / "artifacts", step)
    left_out += [artifact_left_out] if artifact_left_out else []
    record = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "slackquery_version": __version__,
        "source_home": str(settings.home.resolve()),
        "published_build": build_id,
        "left_out": left_out,
        "missing_from_home": _missing(settings),
        "removed_partial_copies": removed,
        "files": sorted(
            str(path.relative_to(staging)) for path in staging.rglob("*") if not path.is_dir()
        ),
    }
    files.write_json_atomic(staging / RECORD_NAME, record)
    return record


def _copy_published(
    settings: Settings, folder: Path, step: Callable[[str], None]
) -> tuple[str | None, str | None]:
    """Copy the published artifact, its arrays and seal, and the pointer to it; check the
    copy against its seal. Returns (its build id, None); (None, None) where nothing is
    published; (None, why) where the copy does not match its seal (the home's artifact is
    damaged): it is left out, so that what cannot be made again is still backed up."""
    artifact = current_artifact(settings)
    build_id = None if artifact is None else files.build_id_of(artifact)
    if artifact is None or build_id is None:
        return None, None
    step(f"copying the published artifact {build_id}")
    make_folder(folder)
    for part in (
        artifact,
        files.manifest_file(artifact.parent, build_id),
        files.validation_file(artifact.parent, build_id),
    ):
        _copy_if_present(part, folder / part.name)
    arrays = files.arrays_dir_of(artifact)
    shutil.copytree(arrays, folder / arrays.name, copy_function=_copy_file)
    os.symlink(artifact.name, folder / files.CURRENT_NAME)
    step("checking the copy against its seal")
    damage = validate.seal_damage(folder, build_id, folder / artifact.name)
    if damage is None:
        return build_id, None
    shutil.rmtree(folder)
    return None, (
        f"the published artifact, {damage}; `slackquery reconcile` in the home (or in the "
        "backup) builds and publishes a sound one"
    )


def _copy_if_present(source: Path, target: Path) -> None:
    if source.is_file():
        make_folder(target.parent)
        _copy_file(source, target)


def _copy_file(source: Path | str, target: Path | str) -> None:
    """Copy bytes and mode, then fsync: the record is written only over durable copies."""
    shutil.copyfile(source, target)
    shutil.copymode(source, target)
    with open(target, "rb") as handle:
        os.fsync(handle.fileno())
