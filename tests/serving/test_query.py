"""Query-side text handling: BM25 query tokens, question parts, and expected answer types."""

import pytest

from serving.artifact import fold_name
from serving.query import (
    answer_types,
    content_tokens,
    holds_answer_type,
    parse_query,
    query_aspects,
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


def test_question_parts_are_capped_with_a_note() -> None:
    listed = ", ".join(f"topic{index}" for index in range(150))
    aspects = query_aspects(listed, max_parts=8)
    assert aspects.parts == [f"topic{index}" for index in range(8)]
    assert aspects.dropped == 142
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


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("x during:0000-01", "out of range"),
        ("x during:0000", "out of range"),
        ("x on:0000-01-01", "not a date"),
        ("x during:2024-13", "not a month"),
        ("x after:10000-01-01", "not a date"),
    ],
)
def test_dates_outside_the_calendar_are_clear_errors(query: str, message: str) -> None:
    with pytest.raises(SlackqueryError, match=message):
        parse_query(query)


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
