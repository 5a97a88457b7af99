"""slackquery.retry_after: the one reading of Retry-After both HTTP clients use."""

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from slackquery.retry_after import parse_retry_after

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_seconds_and_http_dates() -> None:
    assert parse_retry_after("120", T0) == 120.0
    assert parse_retry_after(" 1.5 ", T0) == 1.5
    assert parse_retry_after(format_datetime(T0 + timedelta(seconds=90), usegmt=True), T0) == 90
    assert parse_retry_after(format_datetime(T0 - timedelta(seconds=90), usegmt=True), T0) == 0


@pytest.mark.parametrize("value", [None, "", "soon", "inf", "-inf", "nan", "-5", "1e999"])
def test_absent_or_unusable_values_are_none(value: str | None) -> None:
    assert parse_retry_after(value, T0) is None
