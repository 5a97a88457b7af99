"""Checkpoint processes forked from one process that has imported GX and the suites.

Importing Great Expectations and the suites costs ~6 s, the checks of a small artifact
~3 s, and one builder (a served reconcile flow, a test session) validates many artifacts.
So the builder starts this server once (`python -m expectations.server`), and the server
forks one process per validation: each still opens its candidate read-only by itself, and
its memory leaves with it. The server is single-threaded, so a fork copies no lock held by
another thread, and it never opens an artifact itself.

Protocol, one JSON line each way: the builder writes `{"argv": [...], "log": PATH}` (the
arguments of `python -m expectations.checkpoint`, and where that run's output goes) and
reads back `{"exit": CODE}` once the run has ended. The server exits at end of input,
which is also what it sees when the builder dies: while a run is in progress it watches
its input too, and a builder that dies mid-validation (killed, out of memory) takes the
run with it instead of leaving it to finish (~30 s and 4 GiB at 1M messages) for nobody.
"""

import json
import os
import select
import signal
import sys
import traceback
from typing import Any, TextIO

from expectations import checkpoint


def serve(requests: TextIO, replies: TextIO) -> None:
    """Answer each request line with the exit code of a forked checkpoint run."""
    for line in requests:
        pid = os.fork()
        if pid == 0:
            _run_checkpoint(json.loads(line))
        status = _wait_unless_abandoned(pid, requests)
        if status is None:
            return
        replies.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


def _wait_unless_abandoned(pid: int, requests: TextIO) -> int | None:
    """The run's wait status; None if the input became readable first, which the protocol
    allows only at its end (the builder waits for each reply before writing again): then
    the run is killed."""
    try:
        child = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (macOS, Linux before 5.3): just wait
        return os.waitpid(pid, 0)[1]
    try:
        readable, _, _ = select.select([requests, child], [], [])
        if requests in readable and child not in readable:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        return os.waitpid(pid, 0)[1]
    finally:
        os.close(child)


def _run_checkpoint(request: dict[str, Any]) -> None:
    """The forked process: output to the request's log, exit with the checkpoint's status.

    Its standard streams are the server's protocol pipes until they are replaced here, so
    nothing is printed before that; it leaves with `os._exit`, never returning to `serve`.
    """
    code = 1
    try:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = checkpoint.main(request["argv"])
    except SystemExit as error:  # argparse on bad arguments
        code = error.code if isinstance(error.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
