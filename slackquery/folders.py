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


def readable_by_other_accounts(folder: Path) -> bool:
    """Whether every local account may read the files in `folder`: it and each folder above
    it let others through (o+x), and the files are written world-readable (the umask's)."""
    folder = folder.resolve()
    return folder.is_dir() and all(
        path.stat().st_mode & stat.S_IXOTH for path in (folder, *folder.parents)
    )
