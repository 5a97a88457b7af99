"""Query-side text handling: BM25 query tokens, question parts, and expected answer types."""

import pytest

from serving.artifact import fold_name
from serving.query import answer_types, content_tokens, holds_answer_type, query_aspects


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


def test_multi_part_questions_split_into_parts() -> None:
    assert query_aspects(
        "Catch me up on Sep 14-18: what changed about the database, how was migration "
        "checked, and what happened to QR format v2?"
    ) == [
        "what changed about the database",
        "how was migration checked",
        "what happened to QR format v2",
    ]
    assert query_aspects("Where is the API repository and what health endpoint is used?") == [
        "Where is the API repository",
        "what health endpoint is used",
    ]
    # A part without a content word is no part: one question remains, so no split.
    assert query_aspects("What database was selected for the prototype, and why?") == []
    assert query_aspects("Which command fixed the local 28P01 Postgres failure?") == []
    assert query_aspects("ERR-42") == []


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
