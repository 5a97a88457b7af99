"""Exact ts arithmetic and the derived message flags."""

from datetime import UTC, datetime

import pytest

from slackquery.canonical.rows import datetime_to_us, is_thread_parent, ts_to_us, us_to_ts


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("1704200000.000100", 1_704_200_000_000_100),
        ("1704200000.999999", 1_704_200_000_999_999),
        ("1704200000.1", 1_704_200_000_100_000),
        ("1704200000", 1_704_200_000_000_000),
    ],
)
def test_ts_to_us_is_exact(ts: str, expected: int) -> None:
    assert ts_to_us(ts) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "-1.000001", "1.0000001", "1.", "١٢.3"])
def test_ts_to_us_rejects_non_ts(bad: str) -> None:
    with pytest.raises(ValueError):
        ts_to_us(bad)


def test_round_trip_and_datetimes() -> None:
    assert us_to_ts(1_704_200_000_000_100) == "1704200000.000100"
    moment = datetime(2024, 1, 2, 12, 53, 20, 100, tzinfo=UTC)
    assert datetime_to_us(moment) == 1_704_200_000_000_100


def test_thread_parent_needs_replies() -> None:
    assert is_thread_parent({"reply_count": 2}, "1.000001", "1.000001")
    assert not is_thread_parent({"reply_count": 0}, "1.000001", "1.000001")
    assert not is_thread_parent({"reply_count": 2}, "1.000002", "1.000001")
