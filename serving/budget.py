"""A per-request time budget that retrieval checks between its stages.

The tool boundary starts one `Deadline` per call (`serve_request_budget_s`) and hands it
down; each stage calls `check()` before it starts, so a request that has used its budget
ends with a clear error at the next stage boundary instead of running on. A stage that
has started is never interrupted: the bound on any one stage's cost comes from the other
limits (query length, question parts, candidate window).
"""

import time
from collections.abc import Callable

from slackquery.errors import SlackqueryError


class BudgetExceeded(SlackqueryError):
    """A request ran past its time budget."""


class Deadline:
    """The moment a request's budget runs out, on a monotonic clock (injectable for tests)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self._ends = clock() + seconds

    def remaining(self) -> float:
        """Seconds left (negative once the budget is spent)."""
        return self._ends - self._clock()

    def check(self, stage: str) -> None:
        """Raise `BudgetExceeded` if the budget is spent before `stage` starts."""
        if self.remaining() < 0:
            raise BudgetExceeded(
                f"request ran past its {self.seconds:g} s time budget before {stage}; "
                "try a shorter query, fewer question parts, mode='lexical' or narrower filters"
            )
