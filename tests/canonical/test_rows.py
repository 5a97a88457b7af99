"""Exact ts arithmetic and the derived message flags."""

from datetime import UTC, datetime

import pytest

from slackquery.canonical.rows import (
    LAST_STORABLE_US,
    MESSAGE_COLUMNS,
    TsAfterYear9999,
    datetime_to_us,
    is_slack_id,
    is_thread_parent,
    message_row,
    message_ts,
    seconds_to_datetime,
    ts_to_us,
    unreadable_ts,
    us_to_ts,
)


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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1704200000.000100", ("1704200000.000100", 1_704_200_000_000_100)),
        (1704200000.0001, ("1704200000.000100", 1_704_200_000_000_100)),
        (1704200000.999999, ("1704200000.999999", 1_704_200_000_999_999)),
        (1704200000, ("1704200000.000000", 1_704_200_000_000_000)),
        (4294967295.000001, ("4294967295.000001", 4_294_967_295_000_001)),
    ],
)
def test_message_ts_converts_exact_numbers(value: object, expected: tuple[str, int]) -> None:
    assert message_ts(value, allow_number=True) == expected


@pytest.mark.parametrize("bad", [None, True, -1, 4294967296.5, 1.0000001, [], "1.0000001"])
def test_message_ts_refuses_what_has_no_exact_ts(bad: object) -> None:
    with pytest.raises(ValueError):
        message_ts(bad, allow_number=True)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("1704200000.000100", "1704200000.000100"),  # what Slack writes: kept as it is
        ("01704200000.000100", "1704200000.000100"),
        ("1704200000.0001", "1704200000.000100"),
        ("1704200000", "1704200000.000000"),
        ("1.2", "1.200000"),
    ],
)
def test_message_ts_is_the_canonical_string(given: str, expected: str) -> None:
    assert message_ts(given) == (expected, ts_to_us(given))


def test_thread_and_edited_ts_are_canonical_or_left_out() -> None:
    def row(**fields: object) -> dict[str, object]:
        message = {"ts": "1704200060.000200", "text": "hi", **fields}
        values = message_row(
            message,
            workspace_id="T1",
            channel_id="C1",
            ts="1704200060.000200",
            ts_us=1_704_200_060_000_200,
            day="2024-01-02",
            canonical=b"{}",
        )
        return dict(zip(MESSAGE_COLUMNS, values, strict=True))

    spelled = row(thread_ts="01704200000.0001", edited={"ts": "1704200070.5"})
    assert (spelled["thread_ts"], spelled["is_thread_reply"]) == ("1704200000.000100", True)
    assert (spelled["edited_ts"], spelled["is_edited"]) == ("1704200070.500000", True)
    odd = {"thread_ts": "abc", "edited": {"user": "U1", "ts": "zzz"}}
    unread = row(**odd)
    assert (unread["thread_ts"], unread["is_thread_reply"]) == (None, False)
    assert (unread["edited_ts"], unread["is_edited"]) == (None, True)
    assert unreadable_ts(odd) == [
        "has an unreadable thread_ts ('abc'): stored unthreaded",
        "has an unreadable edited.ts ('zzz'): ignored",
    ]
    assert unreadable_ts({"thread_ts": None, "edited": {"user": "U1"}}) == []


@pytest.mark.parametrize(
    ("channel_id", "expected"),
    [
        ("C0SQGEN01", True),
        ("D1", True),
        ("C:COLON:1", False),
        ("C/SLASH?x=1#", False),
        ("c01", False),
        ("", False),
        ("C０1", False),
    ],
)
def test_only_uppercase_letters_and_digits_are_a_slack_id(channel_id: str, expected: bool) -> None:
    assert is_slack_id(channel_id) is expected


def test_message_ts_takes_numbers_only_when_allowed() -> None:
    with pytest.raises(ValueError):
        message_ts(1704200000.0001)  # the Web API writes strings: sync allows no numbers


def test_message_ts_stops_at_the_last_microsecond_a_datetime_holds() -> None:
    last = us_to_ts(LAST_STORABLE_US)
    assert last == "253402300799.999999"
    assert message_ts(last) == (last, LAST_STORABLE_US)
    for ts in ("253402300800.000000", "99999999999999999999.000000"):
        with pytest.raises(TsAfterYear9999):
            message_ts(ts)


def test_seconds_to_datetime_is_none_out_of_range() -> None:
    assert seconds_to_datetime(1700000000) == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert seconds_to_datetime(1e20) is None
    assert seconds_to_datetime(-1e12) is None
    assert seconds_to_datetime(True) is None
