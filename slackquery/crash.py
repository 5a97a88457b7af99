"""A test hook that kills the process at a named point, for the crash-safety tests.

Crash tests run a pipeline step in a subprocess with `SLACKQUERY_TEST_CRASH_AT=<point>`;
the step SIGKILLs itself when it reaches that point, and the test checks that canonical
data, state and the published artifact are intact and that the next run completes.
Unset in normal runs, every call is a no-op.
"""

import os
import signal

CRASH_ENV = "SLACKQUERY_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    """SIGKILL this process when SLACKQUERY_TEST_CRASH_AT names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
