"""Query-side text handling: BM25 query tokens, question parts, expected answer types and
the days a question names."""

from datetime import UTC, date, datetime

import pytest

from serving.artifact import fold_name
from serving.query import (
    answer_types,
    asks_a_question,
    asks_person,
    content_tokens,
    day_spans,
    day_window_us,
    holds_answer_type,
    named_days,
    parse_query,
    query_aspects,
    relative_days,
    time_frames,
)
from slackquery.errors import SlackqueryError


def test_stop_words_are_dropped_from_the_bm25_query() -> None:
    assert content_tokens("What database was originally selected for the prototype, and why?") == [
        "database",
        "originally",
        "selected",
        "prototype",
    ]


def test_identifiers_and_quoted_words_survive() -> None:
    assert content_tokens("Which command fixed the 28P01 error in v2.3.1?") == [
        "command",
        "fixed",
        "28p01",
        "error",
        "v2",
        "3",
        "1",
    ]
    assert content_tokens('"to be or not to be" draft', ["to be or not to be"]) == [
        "to",
        "be",
        "or",
        "not",
        "to",
        "be",
        "draft",
    ]


def test_a_query_of_only_stop_words_is_kept_whole() -> None:
    assert content_tokens("where is it?") == ["where", "is", "it"]
    assert content_tokens("Don't") == ["don", "t"]


def test_names_fold_accents_and_case() -> None:
    assert fold_name("Chloé") == fold_name("CHLOE") == "chloe"
    assert fold_name("Zoë Müller") == "zoe muller"


def parts(text: str) -> list[str]:
    return query_aspects(text, max_parts=8).parts


def test_multi_part_questions_split_into_parts() -> None:
    assert parts(
        "Catch me up on Sep 14-18: what changed about the database, how was migration "
        "checked, and what happened to QR format v2?"
    ) == [
        "what changed about the database",
        "how was migration checked",
        "what happened to QR format v2",
    ]
    assert parts("Where is the API repository and what health endpoint is used?") == [
        "Where is the API repository",
        "what health endpoint is used",
    ]
    # A part without a content word is no part: one question remains, so no split.
    assert parts("What database was selected for the prototype, and why?") == []
    assert parts("Which command fixed the local 28P01 Postgres failure?") == []
    assert parts("ERR-42") == []


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        ("Nowadays, how big can a body sent to Godwit be?", "how big can a body sent to Godwit be"),
        ("Which room was notified, originally?", "Which room was notified"),
        ("As things stand, who looks after Dunlin?", "who looks after Dunlin"),
        ("Quick one: how soon are records purged?", "how soon are records purged"),
    ],
)
def test_a_lead_in_or_a_time_frame_is_context_not_a_part(question: str, asked: str) -> None:
    aspects = query_aspects(question, max_parts=8)
    assert aspects.parts == [] and aspects.asked == asked


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        # A clock time's or a URL's colon ends no lead-in: "02:00" made the part "00 UTC ...".
        (
            "Why did the alert fire at 02:00 UTC on April 4?",
            "Why did the alert fire at 02:00 UTC on April 4",
        ),
        ("Who posted at 10:31 about pgbouncer?", "Who posted at 10:31 about pgbouncer"),
        ("Who wrote https://docs.example.com/eta?", "Who wrote https://docs.example.com/eta"),
        # Two question words of one thing: "When" alone was a part without content, dropped.
        ("When and where is the team offsite?", "When and where is the team offsite"),
        (
            "Quick one: who and when approved the SRE budget?",
            "who and when approved the SRE budget",
        ),
    ],
)
def test_one_question_stays_one_part(question: str, asked: str) -> None:
    aspects = query_aspects(question, max_parts=8)
    assert aspects.parts == [] and aspects.asked == asked


def test_a_part_that_names_a_time_frame_and_more_stays_a_part() -> None:
    question = "What is the current sync time, and what was its earlier slot?"
    assert parts(question) == ["What is the current sync time", "what was its earlier slot"]
    assert query_aspects(question, max_parts=8).asked == question


def test_question_parts_are_capped_with_a_note() -> None:
    listed = ", ".join(f"topic{index}" for index in range(150))
    aspects = query_aspects(listed, max_parts=8)
    assert aspects.parts == [f"topic{index}" for index in range(8)]
    assert len(aspects.dropped) == 142
    assert aspects.note() == (
        "only the first 8 question parts were searched on their own (142 dropped)"
    )
    assert query_aspects("deploy, rollback", max_parts=8).note() is None


DAY_US = 86_400_000_000
LAST_DAY_US = 253_402_214_400_000_000  # 9999-12-31T00:00:00Z


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("x after:9999-12-31", LAST_DAY_US + DAY_US, None),
        ("x on:9999-12-31", LAST_DAY_US, LAST_DAY_US + DAY_US - 1),
        ("x during:9999", LAST_DAY_US - 364 * DAY_US, LAST_DAY_US + DAY_US - 1),
        ("x during:9999-12", LAST_DAY_US - 30 * DAY_US, LAST_DAY_US + DAY_US - 1),
        ("x before:0001-01-01", None, -62_135_596_800_000_000 - 1),
        ("x during:2024-02", 1_706_745_600_000_000, 1_709_251_200_000_000 - 1),
        ("x on:2024-03-01", 1_709_251_200_000_000, 1_709_337_600_000_000 - 1),
    ],
)
def test_date_operators_hold_at_the_calendar_edges(
    query: str, start: int | None, end: int | None
) -> None:
    parsed = parse_query(query)
    assert (parsed.start_ts_us, parsed.end_ts_us) == (start, end)


def test_today_and_yesterday_are_utc_days() -> None:
    # Read the clock on both sides of the parse: a test run across midnight sees either day.
    days = {datetime.now(UTC).date()}
    today, yesterday = parse_query("x on:today"), parse_query("x on:yesterday")
    days.add(datetime.now(UTC).date())
    starts = {(day - date(1970, 1, 1)).days * DAY_US for day in days}
    assert today.start_ts_us in starts
    assert yesterday.start_ts_us in {start - DAY_US for start in starts}
    assert yesterday.end_ts_us == yesterday.start_ts_us + DAY_US - 1


@pytest.mark.parametrize(
    ("query", "text", "excluded"),
    [
        ("pgbouncer -coffee", "pgbouncer", ["coffee"]),
        ('deploy -"release train" -ERR-42', "deploy", ["release train", "ERR-42"]),
        ("well-known e-mail", "well-known e-mail", []),  # a hyphen inside a word is text
        ("- dash alone -", "- dash alone -", []),
        ("-coffee", "", ["coffee"]),  # excluding alone lists what is left, newest first
    ],
)
def test_a_word_after_a_dash_is_excluded_not_searched(
    query: str, text: str, excluded: list[str]
) -> None:
    # Slack's `-word`; it was searched as a wanted word, ranking its messages up.
    parsed = parse_query(query)
    assert (parsed.text, parsed.excluded) == (text, excluded)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("x during:0000-01", "out of range"),
        ("x during:0000", "out of range"),
        ("x on:0000-01-01", "not a date"),
        ("x during:2024-13", "not a month"),
        ("x after:10000-01-01", "not a date"),
        ("budget -in:#eng", "-in:#eng: excluding with '-' is not supported"),
        ("-FROM:@bob budget", "-FROM:@bob: excluding"),
        ("budget to:@priya", "to:@priya is not supported; narrow with in:"),
    ],
)
def test_bad_dates_and_exclusions_are_clear_errors(query: str, message: str) -> None:
    with pytest.raises(SlackqueryError, match=message):
        parse_query(query)


def test_a_quoted_phrase_holds_no_operator() -> None:
    # `"how to:do it"` was refused as the `to:` operator, `"meet in:person"` a channel filter.
    for text in ("send to:ops now", "meet in:person"):
        parsed = parse_query(f'"{text}"')
        assert parsed.phrases == [text] and parsed.channel_names == []
    assert parse_query('in:"general chat" "a in:b"').channel_names == ["general chat"]


def test_a_quoted_name_may_follow_its_sigil() -> None:
    parsed = parse_query('cap from:@"Samir Haddad" in:#"jose, zoe"')
    assert (parsed.user_names, parsed.channel_names) == (["@Samir Haddad"], ["#jose, zoe"])
    assert parsed.text == "cap" and parsed.phrases == []


@pytest.mark.parametrize(
    ("question", "kinds"),
    [
        ("When's the dress rehearsal and who's checking the backend?", ("time",)),
        ("Who owned the mockup and when was its first review due?", ("time",)),
        ("What time is standup?", ("time",)),
        ("How many rows can a customer export?", ("number",)),
        ("How long does one person stay on call?", ("number",)),
        ("Where is the API repository?", ("place",)),
        ("When and where is the team offsite?", ("time", "place")),
        ("At what hour does the nightly batch start?", ("time",)),
        ("On which day of the week is maintenance?", ("time",)),
        ("How big can a request body be?", ("number",)),
        ("How frequently are backups taken?", ("number",)),
        ("What percentage of scans failed?", ("number",)),
        ("Which Slack room gets the alerts?", ("place",)),
        ("In which channel do deploys post?", ("place",)),
        ("What link has the runbook?", ("place",)),
        ("Which person owns the link checker?", ()),
        ("From which channels did the alerts come?", ("place",)),
        ("Which channel's owner approved it?", ()),
        # Relative, not interrogative: no answer type.
        ("Find the message where Meera approved freezing QR v2", ()),
        ("what broke when we upgraded the worker", ()),
        ("Why did we ditch Mongo?", ()),
    ],
)
def test_answer_types_come_from_interrogatives(question: str, kinds: tuple[str, ...]) -> None:
    assert answer_types(question) == kinds


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("Leo owns the mockup review by 2026-09-03", "time", True),
        ("rehearsal at 16:00 IST in Hall B", "time", True),
        ("Café meeting at 3pm", "time", True),
        ("moved to Sep 23rd", "time", True),
        ("on 3 March, after the freeze", "time", True),
        ("Database failover drill scheduled for Friday", "time", True),
        ("Can someone own the review soon?", "time", False),
        ("the market is calm", "time", False),
        ("we need 12 volunteers", "number", True),
        ("we need two more volunteers", "number", True),
        ("no one volunteered", "number", False),
        ("Docs are at https://docs.acme.dev/runbooks please read", "place", True),
        ("deploy check is on /healthz", "place", True),
        ("keep updates in #ops", "place", True),
        ("the repo path is unchanged", "place", False),
    ],
)
def test_answer_type_cues_in_message_text(text: str, kind: str, expected: bool) -> None:
    assert holds_answer_type(text, (kind,)) is expected


@pytest.mark.parametrize(
    ("question", "days"),
    [
        ("what did Nikhil say in #build-help on Sep 28?", [((None, 9, 28), (None, 9, 28))]),
        ("Catch me up on Sep 14–18: what changed?", [((None, 9, 14), (None, 9, 18))]),
        ("Catch me up on Sep 28 - Oct 2", [((None, 9, 28), (None, 10, 2))]),
        ("why was the API down in the early morning of April 4th", [((None, 4, 4), (None, 4, 4))]),
        ("the 4th of July, 2024 release", [((2024, 7, 4), (2024, 7, 4))]),
        ("March 3, 2025 through March 5", [((2025, 3, 3), (2025, 3, 5))]),
        ("what shipped on 2026-09-28?", [((2026, 9, 28), (2026, 9, 28))]),
        ("may 4 people join? May 4 works", [((None, 5, 4), (None, 5, 4))]),  # the verb is no day
        ("how many volunteers for manual entry?", []),
        ("v2.3 on sep 31", [((None, 9, 31), (None, 9, 31))]),  # no such day: dropped when read
        ("What did we decide in September?", [((None, 9, None), (None, 9, None))]),
        ("during the month of March, 2024", [((2024, 3, None), (2024, 3, None))]),
        ("in Sep 28 and the March release", [((None, 9, 28), (None, 9, 28))]),  # a day; a name
    ],
)
def test_days_named_in_words(question: str, days: list) -> None:
    assert named_days(question) == days


@pytest.mark.parametrize(
    ("question", "days"),
    [  # relative to Wednesday 2026-03-04
        ("what broke yesterday?", [((2026, 3, 3), (2026, 3, 3))]),
        ("deploys this  week", [((2026, 3, 2), (2026, 3, 4))]),
        ("what did we ship last week?", [((2026, 2, 23), (2026, 3, 1))]),
        (
            "last month, then this month",
            [((2026, 2, 1), (2026, 2, 28)), ((2026, 3, 1), (2026, 3, 4))],
        ),
        ("who owns the deploy today?", []),  # asks how things stand now, not for a day
    ],
)
def test_days_named_relative_to_today(question: str, days: list) -> None:
    assert named_days(question, today=date(2026, 3, 4)) == days


def test_a_relative_day_before_the_calendar_starts_is_left_out() -> None:
    first_day = date(1, 1, 1)  # a Monday
    assert relative_days("yesterday, last week, last month, this week", first_day) == [
        ((1, 1, 1), (1, 1, 1))
    ]


@pytest.mark.parametrize(
    ("question", "frames"),
    [
        ("What is the current Wednesday pilot sync time?", {"latest"}),
        ("At present, which person looks after Dunlin?", {"latest"}),
        ("Nowadays, how big can a request body be?", {"latest"}),
        ("As things stand, how many replicas serve traffic?", {"latest"}),
        ("Do we still support older Safari versions?", {"latest"}),
        ("Who owns the deploy at the moment?", {"latest"}),
        ("What database was originally selected for the prototype?", {"earliest"}),
        ("Who used to own the scanner?", {"earliest"}),
        ("What is the current sync time, and what was its earlier slot?", {"latest", "earliest"}),
        ("Which programming stack was used to build Lapwing?", set()),  # passive
        ("Let me know the first release date", set()),  # "know" is not "now"; "first" names
        ("What is the concurrency limit?", set()),
    ],
)
def test_questions_about_how_things_stand_now_or_stood_at_first(
    question: str, frames: set[str]
) -> None:
    assert time_frames(question) == frames


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Quick one: how soon does Curlew purge stored records?", True),
        ("can someone own the review？  ", True),
        ("Can someone own the review? Need it by lunch.", False),  # ends by stating
        ("90 days, I set that myself.", False),
    ],
)
def test_a_text_asks_when_it_ends_with_a_question_mark(text: str, asks: bool) -> None:
    assert asks_a_question(text) is asks


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("Who owned the QR scanner mockup?", True),
        ("When's the dress rehearsal and who's checking the backend?", True),
        ("Nowadays, which person looks after Dunlin?", True),
        ("Whose idea was the freeze?", True),
        ("Find the message from the person who approved it", False),  # not the question
        ("What is the current sync time?", False),
    ],
)
def test_questions_that_ask_who(question: str, asks: bool) -> None:
    assert asks_person(question) is asks


def _us(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * 1_000_000


def test_named_days_are_read_within_the_archive_and_every_time_zone() -> None:
    span = (_us(2025, 11, 20), _us(2026, 10, 5))
    assert day_spans(named_days("on Sep 28"), span) == [(date(2026, 9, 28), date(2026, 9, 28))]
    # A range into an earlier month ends a year on; the span's only Nov 25 is in 2025.
    assert day_spans(named_days("Dec 30 to Jan 2, Nov 25"), span) == [
        (date(2025, 12, 30), date(2026, 1, 2)),
        (date(2025, 11, 25), date(2025, 11, 25)),
    ]
    assert day_spans(named_days("Sep 31, Oct 30, 2027-01-01, Jan 10 2024"), span) == []
    assert day_spans(named_days("Sep 20 - Sep 2"), span) == []  # ends before it starts
    # A whole month, in the latest year where any of its days lies in the span.
    assert day_spans(named_days("in November, in February"), span) == [
        (date(2025, 11, 1), date(2025, 11, 30)),
        (date(2026, 2, 1), date(2026, 2, 28)),
    ]
    assert day_spans(named_days("during November 2026, in Nov 2024"), span) == []
    # An archive reaching the calendar's ends (a malformed export's timestamps) still works.
    edges = (_us(1, 1, 2) - 10**12, _us(9999, 12, 31))
    assert day_spans(named_days("on 0001-01-01 and on Jan 1"), edges) == [
        (date(1, 1, 1), date(1, 1, 1)),
        (date(9999, 1, 1), date(9999, 1, 1)),
    ]
    assert day_spans(named_days("Dec 31 to Jan 1"), edges) == []  # would end in year 10000
    hour = 3_600_000_000
    # From the first day's start at UTC+14 to the last day's end at UTC-12.
    assert day_window_us(date(2026, 9, 28), date(2026, 9, 29)) == (
        _us(2026, 9, 28) - 14 * hour,
        _us(2026, 9, 30) + 12 * hour - 1,
    )
