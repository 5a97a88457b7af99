"""Property-based tests of everything that reads untrusted text: the query parser and its
Slack operators, question parts, cursors, permalinks and the one-line error formatter.

The one property everywhere: any input either works or fails with a `SlackqueryError`
(the one-line, user-facing kind); nothing else escapes. Runs are derandomized (the same
examples every run) and small, so the suite is fast and deterministic.
"""

import string
import unicodedata
from datetime import date

from hypothesis import example, given, settings
from hypothesis import strategies as st

from serving.cursor import CursorCodec
from serving.permalink import parse_permalink
from serving.query import day_spans, day_window_us, named_days, parse_query, query_aspects
from serving.tools import MAX_ERROR_CHARS, one_line
from slackquery.errors import SlackqueryError

FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None)
DAY_US = 86_400_000_000
INT64 = 2**63

operators = st.sampled_from(["in", "from", "before", "after", "on", "during", "is", "has"])
edge_days = st.sampled_from(["9999-12-31", "0001-01-01", "0000-01-01", "2024-02-29", "2023-02-29"])
day_values = st.one_of(
    st.dates().map(date.isoformat),
    edge_days,
    st.from_regex(r"[0-9]{4}(-[0-9]{2}){0,2}", fullmatch=True),
    st.sampled_from(["today", "yesterday", "may", "December", "13", "-1"]),
    st.text(max_size=12),
)
operator_terms = st.builds(lambda op, value: f"{op}:{value}", operators, day_values)
queries = st.lists(st.one_of(operator_terms, st.text(max_size=30)), max_size=6).map(" ".join)


def outcome(call, *args):  # type: ignore[no-untyped-def]
    """The call's result, or None when it failed the allowed way (a SlackqueryError)."""
    try:
        return call(*args)
    except SlackqueryError as error:
        assert str(error)
        return None


@FUZZ
@given(queries)
@example("x after:9999-12-31 on:9999-12-31 during:9999")
@example("x during:0000-01 before:0001-01-01")
def test_any_query_parses_or_fails_cleanly(text: str) -> None:
    parsed = outcome(parse_query, text)
    if parsed is None:
        return
    for bound in (parsed.start_ts_us, parsed.end_ts_us):
        assert bound is None or -INT64 <= bound < INT64
    assert '"' not in parsed.text


@FUZZ
@given(st.dates())
def test_day_operators_agree_with_each_other(day: date) -> None:
    on = parse_query(f"x on:{day.isoformat()}")
    after = parse_query(f"x after:{day.isoformat()}")
    before = parse_query(f"x before:{day.isoformat()}")
    assert on.start_ts_us is not None and on.end_ts_us is not None
    assert on.end_ts_us - on.start_ts_us == DAY_US - 1
    assert after.start_ts_us == on.end_ts_us + 1
    assert before.end_ts_us == on.start_ts_us - 1
    during = parse_query(f"x during:{day.year:04d}-{day.month:02d}")
    assert during.start_ts_us <= on.start_ts_us <= on.end_ts_us <= during.end_ts_us  # type: ignore[operator]


day_words = st.sampled_from(
    [
        "Sep",
        "sept.",
        "May",
        "may",
        "Dec",
        "Feb",
        "31",
        "29",
        "4th",
        "of",
        "to",
        "–",
        ",",
        "0001-01-01",
    ]
)


@FUZZ
@given(
    st.lists(st.one_of(day_words, st.text(max_size=8)), max_size=8).map(" ".join),
    st.integers(min_value=-(2**62), max_value=2**62),
    st.integers(min_value=0, max_value=2**62),
)
@example("Dec 31 to Jan 1, 9999-12-31 Jan 1", 253_402_214_400_000_000, 0)
def test_named_days_read_any_text_within_any_span(text: str, start: int, length: int) -> None:
    for first, last in day_spans(named_days(text), (start, start + length)):
        low, high = day_window_us(first, last)
        assert first <= last and -INT64 <= low < high < INT64


@FUZZ
@given(st.text(max_size=400), st.integers(min_value=2, max_value=10))
@example(", ".join(f"part{index}" for index in range(150)), 8)
def test_question_parts_never_exceed_the_cap(text: str, cap: int) -> None:
    aspects = query_aspects(text, cap)
    assert len(aspects.parts) <= cap
    assert aspects.parts == [] or len(aspects.parts) >= 2
    assert (aspects.note() is None) == (not aspects.dropped)


CODEC = CursorCodec("fuzz-secret")


@FUZZ
@given(
    st.text(alphabet=string.ascii_letters + string.digits + "-_", max_size=40),
    st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
    st.integers(min_value=0, max_value=10**9),
)
def test_cursors_round_trip(artifact: str, request_fingerprint: str, offset: int) -> None:
    cursor = CODEC.encode(artifact, request_fingerprint, offset)
    assert CODEC.decode(cursor, artifact, request_fingerprint) == offset


@FUZZ
@given(st.data())
def test_edited_cursors_are_refused(data: st.DataObject) -> None:
    cursor = CODEC.encode("build-1", "fp", 20)
    position = data.draw(st.integers(min_value=0, max_value=len(cursor)))
    inserted = data.draw(st.text(min_size=1, max_size=3))
    removed = data.draw(st.integers(min_value=0, max_value=2))
    edited = cursor[:position] + inserted + cursor[position + removed :]
    if edited.strip() == cursor:
        return
    assert outcome(CODEC.decode, edited, "build-1", "fp") is None


@FUZZ
@given(st.text(max_size=600))
@example("abc.dé")
@example("null")
def test_any_text_as_a_cursor_is_refused_cleanly(text: str) -> None:
    assert outcome(CODEC.decode, text, "build-1", "fp") is None


slugs = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True)
channels = st.from_regex(r"[CDG][A-Z0-9]{2,10}", fullmatch=True)


@FUZZ
@given(slugs, channels, st.integers(min_value=1_000_000, max_value=99_999_999_999_999_999))
def test_permalinks_round_trip(slug: str, channel: str, micros: int) -> None:
    digits = str(micros)
    link = parse_permalink(f"https://{slug}.slack.com/archives/{channel}/p{digits}?thread_ts=1")
    assert (link.workspace_slug, link.channel_id) == (slug, channel)
    assert link.ts.replace(".", "") == digits


url_parts = st.sampled_from(
    ["https://", "http://", "acme", "＃", ".slack.com", "[", "]", "::1", "zzz", "@", ":99999",
     "/archives/", "C1", "/p", "1234567890", "%00", "?", "#", "\u0000", "ｓｌａｃｋ", ".."]
)  # fmt: skip


@FUZZ
@given(st.lists(st.one_of(url_parts, st.text(max_size=8)), max_size=10).map("".join))
@example("https://acme＃.slack.com/archives/C1/p1234567890")
@example("https://[zzz]/archives/C1/p1234567890")
@example("https://[::1/archives/C1/p1234567890")
def test_any_url_parses_as_a_permalink_or_fails_cleanly(value: str) -> None:
    link = outcome(parse_permalink, value)
    if link is not None:
        assert link.channel_id.isascii() and link.ts.replace(".", "").isdigit()


@FUZZ
@given(st.text(max_size=2000))
@example("x" * 100_097)
@example("line\nbreak\x00nul\u2028sep\u202eltr")
def test_error_lines_are_short_single_lines(message: str) -> None:
    line = one_line(message)
    assert len(line) <= MAX_ERROR_CHARS
    assert not any(unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") for char in line)
    assert "\u202e" not in line
    if len(message) <= MAX_ERROR_CHARS and message.isprintable():
        assert line == message
