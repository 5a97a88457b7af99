"""Time ranges by binary search inside ascending runs equal comparing every row."""

import numpy as np
import pytest

from serving.time_runs import TimeRuns


def runs_of(seed: int, runs: int, rows: int) -> np.ndarray:
    """`runs` stretches of non-decreasing timestamps (repeats included), in no order."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, rows), runs - 1, replace=False))
    parts = np.split(rng.integers(1_000, 2_000, rows), cuts)
    return np.concatenate([np.sort(part) for part in parts]).astype(np.int64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("runs", [1, 7, 500])  # 500 of 5,000 rows: compared, not searched
def test_rows_between_equal_a_comparison_of_every_row(seed: int, runs: int) -> None:
    ts = runs_of(seed, runs, 5_000)
    time_runs = TimeRuns(ts)
    rng = np.random.default_rng(100 + seed)
    bounds = [None, 0, 999, 1_000, 1_999, 2_000, 5_000, *rng.integers(990, 2_010, 20).tolist()]
    for start in bounds:
        for end in bounds:
            expected = np.ones(ts.size, dtype=bool)
            if start is not None:
                expected &= ts >= start
            if end is not None:
                expected &= ts <= end
            assert time_runs.rows_between(start, end).tolist() == expected.tolist()
    assert (time_runs._index is None) == (runs == 500)


def test_no_rows_and_one_timestamp() -> None:
    assert TimeRuns(np.zeros(0, dtype=np.int64)).rows_between(1, 2).size == 0
    same = TimeRuns(np.full(10, 7, dtype=np.int64))
    assert same.rows_between(7, 7).all()
    assert not same.rows_between(8, None).any()
    assert not same.rows_between(None, 6).any()
