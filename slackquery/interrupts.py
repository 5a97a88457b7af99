"""Ctrl-C and SIGTERM while DuckDB works.

A signal handler's exception does not reach Python as itself when DuckDB is executing: it
ends the query and raises its own `RuntimeError('Query interrupted')`, the handler's
exception as its cause. What cleans up after a stop (a build records itself interrupted,
an embed run hands back its claims, the CLI exits 130 or 143) matches KeyboardInterrupt,
so `as_raised` gives that back, and `kept` raises one that a library caught (dbt reports
such a query as its own failure). A commit must not end in that error either: under
`held` a stop waits for the commit, so that what the command says matches the store.
"""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOPS = (signal.SIGINT, signal.SIGTERM)


def stop_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (`cli.Terminated`) that DuckDB ended a query for, if any."""
    cause = error.__cause__
    if isinstance(error, RuntimeError) and isinstance(cause, KeyboardInterrupt):
        return cause
    return None


@contextmanager
def as_raised() -> Iterator[None]:
    """Raise the stop itself where DuckDB raised its wrapper of it."""
    try:
        yield
    except RuntimeError as error:
        stop = stop_behind(error)
        if stop is None:
            raise
        raise stop from None


@contextmanager
def kept() -> Iterator[None]:
    """Raise, once the block ends, a stop raised in it that the code in it caught or
    wrapped. Only handlers of this process's own (the CLI's) raise; others are left be."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops: list[KeyboardInterrupt] = []

    def keeping(handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
        def handle(number: int, frame: Any) -> Any:
            try:
                return handler(number, frame)
            except KeyboardInterrupt as stop:
                stops.append(stop)
                raise

        return handle

    previous = {number: signal.getsignal(number) for number in STOPS}
    for number, handler in previous.items():
        if callable(handler):
            signal.signal(number, keeping(handler))
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        if stops:
            raise stops[0] from None
        raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if stops:
        raise stops[0]


@contextmanager
def held(note: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block has ended, then act as if sent then, with
    `note` on what they raise when the block ended well (`the import had committed`).
    Signals reach only the main thread's handlers: elsewhere this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def record(number: int, frame: object) -> None:
        caught.append(number)

    previous = {number: signal.signal(number, record) for number in STOPS}
    ended_well = False
    try:
        yield
        ended_well = True
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if caught:
            try:
                signal.raise_signal(caught[0])  # runs the handler put back, here
            except KeyboardInterrupt as stop:
                if ended_well:
                    stop.add_note(note)
                raise
