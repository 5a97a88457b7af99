"""slackquery.duckdb_setup: how a database another process holds is opened."""

from contextlib import ExitStack
from pathlib import Path

import duckdb
import pytest

from slackquery import duckdb_setup
from slackquery.errors import SlackqueryError
from tests.conftest import FakeClock
from tests.crashing import held_open


def test_a_writer_waits_for_a_file_another_process_lets_go_of(
    tmp_path: Path, lock_wait_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A scheduled reconcile failed when `slackquery artifacts` read the state at that moment.
    path = tmp_path / "state.duckdb"
    duckdb.connect(str(path)).close()
    with ExitStack() as holding:
        holding.enter_context(held_open(path))

        def sleep_then_let_go(seconds: float) -> None:
            lock_wait_clock.sleep(seconds)
            if len(lock_wait_clock.slept) == 3:
                holding.close()

        monkeypatch.setattr(duckdb_setup, "_sleep", sleep_then_let_go)
        duckdb_setup.open_database(str(path)).close()
    assert lock_wait_clock.slept == [0.05, 0.1, 0.2]


def test_a_writer_gives_up_after_its_wait_and_a_reader_does_not_wait(
    tmp_path: Path, lock_wait_clock: FakeClock
) -> None:
    path = tmp_path / "state.duckdb"
    duckdb.connect(str(path)).close()
    with held_open(path) as holder:
        for read_only in (True, False):
            with pytest.raises(SlackqueryError, match=f"busy: another process \\(PID {holder}\\)"):
                duckdb_setup.open_database(str(path), read_only=read_only, what="state database")
            if read_only:
                assert lock_wait_clock.slept == []
    waited = sum(lock_wait_clock.slept)
    assert duckdb_setup.WRITER_LOCK_WAIT_S - 1 <= waited <= duckdb_setup.WRITER_LOCK_WAIT_S
    assert max(lock_wait_clock.slept) == 1.0
