"""Query-side token handling: stop words leave the BM25 query, never identifiers or phrases."""

from serving.artifact import fold_name
from serving.query import content_tokens, query_aspects


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
