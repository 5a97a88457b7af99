"""What new processes derive from the packaged models' files, kept on disk between them.

A process that embeds (a cold `slackquery search` in hybrid mode, an `ask`, each stdio MCP
server, each Dask worker) pays for three things before its first vector that depend only
on files that rarely change:

- the sha256 of each weights file (e5 71.6 MB and MiniLM 90.9 MB: ~0.14 s together), which
  pins the model and names its vectors' generation. `file_sha256` remembers a file's digest
  with the file's device, inode, size, mtime and ctime, as git's index does: writing to the
  file or replacing it changes them, and then it is hashed again.
- built onnxruntime graphs (~0.28 s for e5, ~0.13 s for MiniLM) and e5's tokenizer piece
  index (~0.1 s). `cached_build` keeps such bytes under a name derived from what they depend
  on (`key`: the weights' sha256, the engine, library versions, a recipe number raised when
  the code that builds them changes). A digest written beside each is checked on every
  read; bytes that fail the check are built and written again.

Everything here is derived: deleting the folder is always safe, and a folder that cannot
be written costs only the work it would have saved. Storing a build prunes the folder to
the newest `KEPT_BUILDS` of its kind.
"""

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from slackquery.folders import make_folder

# A file changed less than this long before its digest was taken could change again within
# the same timestamp tick unseen, so its digest is not remembered.
SETTLED_NS = 1_000_000_000
# Builds of each kind kept when another is stored: one per model and engine in use, with
# room to spare. Each upgrade of a library in a key leaves its predecessors behind (~32 MB of
# graphs), so the oldest go; one still in use is built again the next time it is needed.
KEPT_BUILDS = 8

log = logging.getLogger(__name__)


def file_sha256(path: Path, folder: Path | None) -> str:
    """sha256 hex of the file at `path`, remembered in `folder` (None: always hashed)."""
    with path.open("rb") as handle:
        identity = _identity(handle.fileno())
        remembered = _remembered(folder, path, identity)
        if remembered is not None:
            return remembered
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    _remember(folder, path, identity, digest)
    return digest


def cached_build(
    folder: Path | None, key: Sequence[str], suffix: str, build: Callable[[], bytes]
) -> bytes:
    """The bytes `key` names, read from `folder` when a verified copy is there, else built
    by `build()` and stored (best effort). `folder` None: always built."""
    if folder is None:
        return build()
    name = hashlib.sha256("\0".join(key).encode()).hexdigest()[:32]
    path = folder / f"{name}{suffix}"
    stored = _verified(folder, path)
    if stored is not None:
        return stored
    content = build()
    try:
        _store(path, content)
        _prune(folder, suffix)
    except OSError as error:
        log.debug("could not keep %s in %s: %s", suffix, folder, error)
    return content


def _prune(folder: Path, suffix: str) -> None:
    """Drop all but the `KEPT_BUILDS` newest builds of this kind, and the remembered digests
    of files that no longer exist (a removed virtualenv's weights)."""
    builds = sorted(folder.glob(f"*{suffix}"), key=_modified_ns, reverse=True)
    for stale in builds[KEPT_BUILDS:]:
        stale.unlink(missing_ok=True)
        _digest_path(stale).unlink(missing_ok=True)
    for memo in (folder / "digests").glob("*.json"):
        try:
            remembered = json.loads(memo.read_text(encoding="utf-8")).get("path")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(remembered, str) and not Path(remembered).exists():
            memo.unlink(missing_ok=True)


def _modified_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # removed meanwhile by another process's prune
        return 0


def _identity(descriptor: int) -> list[int]:
    stat = os.fstat(descriptor)
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _memo_path(folder: Path, path: Path) -> Path:
    name = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return folder / "digests" / f"{name}.json"


def _remembered(folder: Path | None, path: Path, identity: list[int]) -> str | None:
    """The digest remembered for this file if it is still the file it was taken of."""
    if folder is None:
        return None
    try:
        memo = json.loads(_memo_path(folder, path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(memo, dict) or memo.get("identity") != identity:
        return None
    digest = memo.get("sha256")
    return digest if isinstance(digest, str) else None


def _remember(folder: Path | None, path: Path, identity: list[int], digest: str) -> None:
    *_, mtime_ns, ctime_ns = identity
    if folder is None or time.time_ns() - max(mtime_ns, ctime_ns) < SETTLED_NS:
        return
    memo = {"path": str(path), "identity": identity, "sha256": digest}
    try:
        _write_by_rename(_memo_path(folder, path), json.dumps(memo).encode())
    except OSError as error:
        log.debug("could not remember the digest of %s in %s: %s", path, folder, error)


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _verified(folder: Path, path: Path) -> bytes | None:
    """The bytes at `path` if the digest file beside them names their sha256, else None."""
    try:
        with path.open("rb") as handle:
            identity = _identity(handle.fileno())
            content = handle.read()
        expected = _digest_path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    digest = _remembered(folder, path, identity)
    if digest is None:
        digest = hashlib.sha256(content).hexdigest()
        _remember(folder, path, identity, digest)
    if digest != expected:
        log.debug("cached %s does not match its digest; building it again", path)
        return None
    return content


def _store(path: Path, content: bytes) -> None:
    """Write the bytes, then their digest, each by rename: a reader sees whole files, and
    bytes without their digest (or with another's) are built again."""
    _write_by_rename(path, content)
    _write_by_rename(_digest_path(path), hashlib.sha256(content).hexdigest().encode("ascii"))


def _write_by_rename(target: Path, content: bytes) -> None:
    make_folder(target.parent)
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        temp.write_bytes(content)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
