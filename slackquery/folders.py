"""The folders Slackquery makes for its stores: private to the account that runs it.

A home holds every private channel and DM it imported, so a folder Slackquery creates is
rwx------ whatever the umask: the files inside keep ordinary modes, and the folder is what
keeps other local accounts out. A folder that already exists keeps its mode: it is the
operator's (a group that may read the artifacts, a shared mount).
"""

import stat
from pathlib import Path

PRIVATE_FOLDER_MODE = 0o700


def make_folder(folder: Path) -> Path:
    """Create `folder` and each missing parent as a private folder; return `folder`.

    A file in the way raises, as `mkdir` does.
    """
    missing_parents = []
    for parent in folder.parents:
        if parent.exists():
            break
        missing_parents.append(parent)
    # mkdir's mode is masked by the umask; 0700 keeps its bits under any usual umask.
    for parent in reversed(missing_parents):
        parent.mkdir(mode=PRIVATE_FOLDER_MODE, exist_ok=True)
    folder.mkdir(mode=PRIVATE_FOLDER_MODE, exist_ok=True)
    return folder


def readable_by_other_accounts(path: Path) -> bool:
    """Whether every local account may read the file `path`, or the files in the folder
    `path` (written world-readable, as the umask leaves them): the file lets others read
    it, and each folder above lets others through (o+x)."""
    path = path.resolve()
    if not path.exists():
        return False
    file_readable = path.is_dir() or path.stat().st_mode & stat.S_IROTH
    folders = (path, *path.parents) if path.is_dir() else path.parents
    return bool(file_readable) and all(folder.stat().st_mode & stat.S_IXOTH for folder in folders)
