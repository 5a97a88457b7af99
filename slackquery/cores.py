"""How many cores this process may use: the one answer for every thread pool sized by it."""

import os


def usable_cores() -> int:
    """The cores in this process's CPU affinity set (Linux), else every core the OS reports."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
