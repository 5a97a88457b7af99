"""The answer logic without an artifact: sentence choice, correction order, verdicts,
citation checks."""

from serving.answer_models import AnswerPart, ThreadStart
from serving.answers import (
    QUOTE_CHARS,
    Cited,
    PartTerms,
    _assemble,
    _check,
    answer_part,
    answering_sentence,
    highlight,
    sentences,
    stem,
    uncited_sentences,
    with_thread_starts,
    within_chars,
)
from serving.models import SearchHit, SearchResponse


def terms(*words: str, kinds: tuple[str, ...] = ()) -> PartTerms:
    return PartTerms(" ".join(words), {stem(word): 1.0 for word in words}, kinds)


def hit(document_id: str, text: str, ts_us: int, root: str | None = None) -> SearchHit:
    return SearchHit(
        document_id=document_id,
        source_message_id=f"src-{document_id}",
        workspace_id="W",
        workspace_name=None,
        channel_id="C",
        channel_name="eng",
        conversation_type="public",
        author_id="U",
        author_name="Priya",
        ts_us=ts_us,
        timestamp=f"t{ts_us}",
        thread_id=root,
        thread_root_id=root,
        text=text,
        text_truncated=False,
        permalink=None,
        fused_score=1.0,
    )


def test_sentences_split_on_sentence_ends_and_lines() -> None:
    assert sentences("First one. Second?\n- third\n\nfourth") == [
        "First one.",
        "Second?",
        "- third",
        "fourth",
    ]


def test_sentences_do_not_end_at_initials_or_abbreviations() -> None:
    assert sentences("While I'm away @José N. drives the upgrade. Ping him.") == [
        "While I'm away @José N. drives the upgrade.",
        "Ping him.",
    ]
    assert sentences("Sync moves to 4 p.m. Thursday, e.g. after standup. Thanks") == [
        "Sync moves to 4 p.m. Thursday, e.g. after standup.",
        "Thanks",
    ]


def test_answering_sentence_is_the_one_with_most_coverage() -> None:
    text = "Morning all. The pilot sync moved to Wednesday. Lunch later?"
    assert answering_sentence(text, terms("pilot", "sync")) == "The pilot sync moved to Wednesday."


def test_answering_sentence_prefers_the_asked_for_kind_then_the_earliest() -> None:
    text = "The sync is weekly. The sync is at 16:00."
    assert answering_sentence(text, terms("sync", kinds=("time",))) == "The sync is at 16:00."
    assert answering_sentence(text, terms("sync")) == "The sync is weekly."


def test_a_sentence_that_asks_does_not_answer() -> None:
    text = "Can someone own the review? Leo owns the review by Friday."
    assert answering_sentence(text, terms("own", "review")) == "Leo owns the review by Friday."


def test_a_message_no_sentence_of_which_answers_is_quoted_whole() -> None:
    text = "ok. i checked the latest migration on staging, looks fine."
    assert answering_sentence(text, terms("database")) == text  # not "ok."
    long_text = f"{text} {'More detail follows here. ' * 20}"
    quoted = answering_sentence(long_text, terms("database"))
    assert quoted.startswith(text) and len(quoted) <= QUOTE_CHARS < len(long_text)


def test_stems_match_word_forms() -> None:
    part = terms("mongo", "checked")
    assert part.coverage("We dropped MongoDB after we check the joins") == 1.0
    assert part.coverage("nothing relevant") == 0.0


def test_highlight_bolds_the_sentence() -> None:
    assert highlight("A. B c. D", "B c.") == "A. **B c.** D"
    assert highlight("A", "missing") == "A"


def test_a_part_cites_the_search_order_not_the_most_covering_message() -> None:
    part = terms("sync", "time")
    # a covers half the part, b all of it; both are retrieved, a ranks first.
    hits = [hit("a", "sync", 1), hit("b", "sync time", 2)]

    result = answer_part("sync time", hits, part, 0.75, room=4, multi=False)

    assert result.answer == "sync [a]"
    assert [item.document_id for item in result.evidence] == ["a", "b"]


def test_a_part_of_several_skips_a_top_hit_that_holds_none_of_its_words() -> None:
    hits = [
        hit("pg", "José drives the Postgres upgrade", 1),
        hit("half", "ERR-42 again", 2),
        hit("err", "ERR-42 is the body limit", 3),
    ]
    err = terms("err", "42", "body")
    result = answer_part("what is ERR-42", hits, err, 0.75, room=4, multi=True)
    assert result.answer == "what is ERR-42: ERR-42 is the body limit [err]"
    assert [item.document_id for item in result.evidence] == ["err", "pg", "half"]
    # The whole question's ranking is the part's own when the question asks one thing, and
    # a top hit that holds any of the part's words keeps its place.
    alone = answer_part("what is ERR-42", hits, err, 0.75, room=4, multi=False)
    assert alone.answer.endswith("[pg]")
    upgrade = terms("postgres", "owner")
    kept = answer_part("who owns postgres", hits, upgrade, 0.5, room=4, multi=True)
    assert kept.answer.endswith("[pg]")


def test_a_later_correction_wins_and_the_conflict_is_named() -> None:
    part = terms("pilot", "sync")
    hits = [
        hit("old", "Pilot sync is Wednesday 10:00.", 100),
        hit("new", "Update: pilot sync moved to Wednesday 16:00.", 200),
    ]
    result = answer_part("pilot sync", hits, part, 0.5, room=4, multi=False)
    assert result.supported
    assert result.answer.startswith("Update: pilot sync moved to Wednesday 16:00. [new]")
    assert "[old]" in result.answer
    assert result.conflict is not None and result.conflict.startswith("new")
    assert [item.document_id for item in result.evidence] == ["new", "old"]
    assert result.evidence[0].is_correction


def test_a_question_about_how_things_began_is_answered_by_what_was_corrected() -> None:
    part = terms("pilot", "sync")
    hits = [
        hit("new", "Update: pilot sync moved to Wednesday 16:00.", 200),
        hit("old", "Pilot sync is Wednesday 10:00.", 100),
    ]
    result = answer_part("pilot sync", hits, part, 0.5, room=4, multi=False, asks_first=True)
    assert result.answer == (
        "Pilot sync is Wednesday 10:00. [old] (a later message changed this: "
        '"Update: pilot sync moved to Wednesday 16:00." [new])'
    )
    assert result.conflict is not None and result.conflict.startswith("new (t200) changed")
    assert [item.document_id for item in result.evidence] == ["old", "new"]
    assert result.evidence[1].is_correction


def test_an_earlier_message_with_correction_words_does_not_win() -> None:
    part = terms("pilot", "sync")
    hits = [
        hit("late", "Pilot sync is Wednesday 16:00.", 200),
        hit("early", "Actually the pilot sync is on Tuesday.", 100),
    ]
    result = answer_part("pilot sync", hits, part, 0.5, room=4, multi=False)
    assert result.conflict is None
    assert result.answer == "Pilot sync is Wednesday 16:00. [late]"


def test_a_correction_between_two_lower_hits_does_not_replace_the_answer() -> None:
    part = terms("avocet", "body")
    # The top hit answers in words the part does not use ("2 MB"); the two below it cover
    # the part's words and one of them looks like an update of the other.
    hits = [
        hit("answer", "2 MB, hard limit.", 300),
        hit("later", "Avocet is deployed to ap-northeast-1 now.", 200),
        hit("earlier", "The body limit on the gateway is 8 MB.", 100),
    ]
    result = answer_part("avocet body", hits, part, 0.4, room=4, multi=False)
    assert result.conflict is None
    assert result.answer == "2 MB, hard limit. [answer]"

    # Nor for a question about how things began: the top hit is in neither message.
    began = answer_part("avocet body", hits, part, 0.4, room=4, multi=False, asks_first=True)
    assert began.conflict is None and began.answer == result.answer


def test_a_later_message_stating_another_time_wins_without_cue_words() -> None:
    part = terms("pilot", "sync", kinds=("time",))
    hits = [
        hit("old", "Pilot sync is Wednesday 10:00.", 100),
        hit("new", "Pilot sync is Wednesday 16:00.", 200),
    ]
    result = answer_part("when is the pilot sync", hits, part, 0.5, room=4, multi=False)
    assert result.answer.startswith("Pilot sync is Wednesday 16:00. [new]")
    assert result.conflict is not None and result.conflict.startswith("new")
    assert [item.document_id for item in result.evidence] == ["new", "old"]


def test_the_same_value_or_no_asked_kind_is_no_conflict() -> None:
    hits = [
        hit("first", "Pilot sync is Wednesday 10:00.", 200),
        hit("second", "Reminder: pilot sync Wednesday 10:00.", 100),
    ]
    same = answer_part("pilot sync", hits, terms("pilot", "sync", kinds=("time",)), 0.5, 4, False)
    assert same.conflict is None and same.answer.endswith("[first]")
    differing = [hit("new", "Pilot sync is 16:00.", 200), hit("old", "Pilot sync is 10:00.", 100)]
    unasked = answer_part("pilot sync", differing, terms("pilot", "sync"), 0.5, 4, False)
    assert unasked.conflict is None and unasked.answer == "Pilot sync is 16:00. [new]"


def test_a_weak_part_is_unsupported_and_cites_nothing() -> None:
    part = terms("refund", "policy")
    result = answer_part("refund policy", [hit("a", "policy docs", 1)], part, 0.6, 4, True)
    assert not result.supported and result.evidence == []
    assert result.answer.startswith("refund policy: the archive does not answer")


def _response() -> SearchResponse:
    return SearchResponse(
        query="q",
        mode="hybrid",
        route="mixed",
        weights={},
        filters={},
        artifact_id="build-1",
        generation_id="g",
        results=[],
        next_cursor=None,
        notes=[],
        timings_ms={"total": 1.0},
    )


def _parts(*supported: bool) -> list[AnswerPart]:
    part = terms("sync")
    return [
        answer_part(f"part {n}", [hit(f"d{n}", "sync", n)], part, 0.5 if ok else 2.0, 2, True)
        for n, ok in enumerate(supported)
    ]


def test_verdicts_follow_the_supported_parts() -> None:
    answered = _assemble("q", _parts(True, True), "build-1", _response(), 0.0)
    assert answered.verdict == "answered" and answered.unsupported_parts == []
    assert [c.document_id for c in answered.citations] == ["d0", "d1"]
    partial = _assemble("q", _parts(True, False), "build-1", _response(), 0.0)
    assert partial.verdict == "partial" and partial.unsupported_parts == ["part 1"]
    assert [c.document_id for c in partial.citations] == ["d0"]
    none = _assemble("q", _parts(False, False), "build-1", _response(), 0.0)
    assert none.verdict == "insufficient_evidence" and none.citations == []
    assert "does not answer" in none.answer


def test_an_answer_past_its_character_budget_keeps_what_it_cites() -> None:
    # An evidence pack of 50 long messages was ~118,000 characters, past clients' caps.
    part = terms("sync")
    hits = [hit(f"d{n}", "sync " + "x" * 900, n) for n in range(6)]
    answered = answer_part("part 0", hits, part, 0.5, 6, False)
    whole = _assemble("q", [answered], "build-1", _response(), 0.0)
    assert len(whole.parts[0].evidence) == 6 and [c.document_id for c in whole.citations] == ["d0"]
    size = len(whole.parts[0].evidence[0].model_dump_json())
    cut = within_chars(whole, 3 * size + 10)
    assert [item.document_id for item in cut.parts[0].evidence] == ["d0", "d1", "d2"]
    assert "3 of its 6 evidence messages" in cut.notes[-1]
    # The cited message stays, however small the budget; nothing is cut without one.
    assert [item.document_id for item in within_chars(whole, 10).parts[0].evidence] == ["d0"]
    assert within_chars(whole, None) == whole


def test_every_claim_of_an_answer_is_cited() -> None:
    answer = _assemble("q", _parts(True, True), "build-1", _response(), 0.0).answer
    assert all(line.rstrip().endswith("]") for line in answer.splitlines())


def test_citation_check_reports_each_failure() -> None:
    current = {"a": "same", "b": "new text"}
    before = {"a": "same", "b": "old text", "gone": "x"}
    ok = _check(Cited("[a]", "document_id", "a"), current, before)
    assert ok.problems == [] and ok.unchanged is True
    changed = _check(Cited("[b]", "document_id", "b"), current, before)
    assert changed.problems == ["text changed since it was cited"]
    deleted = _check(Cited("gone", "document_id", None), current, before)
    assert not deleted.exists and not deleted.active
    assert deleted.problems == ["deleted or emptied since it was cited"]
    made_up = _check(Cited("[zz]", "document_id", None), current, None)
    assert made_up.problems == ["no such message in the current artifact"]
    # verify_citations leaves a requester's hidden messages out of `current`, so a hidden
    # citation gets exactly the answer a made-up one gets.
    hidden = _check(Cited("[a]", "document_id", "a"), {"b": "new text"}, None)
    assert not hidden.visible and hidden.problems == made_up.problems
    assert hidden.unchanged is None


def test_the_sentences_a_draft_leaves_uncited_are_named() -> None:
    # A draft citing one claim of two was `verified` with nothing said of the other.
    url = "https://acme.slack.com/archives/C1/p1712937600545000"
    found = [Cited("T0:C1:1.5", "document_id", "T0:C1:1.5"), Cited(url, "permalink", "T0:C1:1.5")]
    draft = (
        "José drives it [T0:C1:1.5]. Priya is the lead.\nThe sync moved to 18:30.\n"
        f"[T0:C1:1.5] {url}\nNo message says who pays. Sources: see above."
    )
    assert uncited_sentences(draft, found) == ["Priya is the lead.", "Sources: see above."]
    assert uncited_sentences("It is at 18:30. [T0:C1:1.5]", found) == []
    for link in (f"<{url}>", f"<{url}|the message>"):  # Slack's own link forms
        assert uncited_sentences(f"It is at 18:30. {link}", found) == [], link
        assert uncited_sentences(f"It is at 18:30 ({link}).", found) == [], link
    many = uncited_sentences(" ".join(f"Claim {n} {'x' * 400}." for n in range(12)), [])
    assert len(many) == 10 and len(many[0]) == 300 and many[0].endswith("…")


def test_a_correction_that_already_ranks_first_still_names_the_conflict() -> None:
    part = terms("pilot", "sync")
    hits = [
        hit("new", "Correction: pilot sync moved to Thursday.", 300),
        hit("old", "Pilot sync is Wednesday.", 100),
    ]
    result = answer_part("pilot sync", hits, part, 0.5, room=4, multi=False)
    assert result.conflict is not None
    assert [item.document_id for item in result.evidence] == ["new", "old"]


def test_a_reply_is_shown_with_the_message_it_answers() -> None:
    part = terms("timeout")
    hits = [
        hit("reply", "45 seconds, check the config.", 2, root="root"),
        hit("root", "What's the upstream timeout?", 1, root="root"),
        hit("alone", "The timeout alarm fired", 3),
    ]
    answered = answer_part("timeout", hits, part, 0.5, 3, False)
    asked = ThreadStart(
        document_id="root",
        author_name="Tomás",
        timestamp="t1",
        text="What's the upstream timeout?",
        permalink=None,
    )
    looked_up: list[str] = []

    def start_of(root_id: str) -> ThreadStart:
        looked_up.append(root_id)
        return asked

    [shown] = with_thread_starts([answered], hits, start_of)
    by_id = {item.document_id: item.in_reply_to for item in shown.evidence}
    # the root and a message outside any thread reply to nothing
    assert by_id == {"reply": asked, "root": None, "alone": None}
    assert looked_up == ["root"]
    assert shown.answer == answered.answer  # context, never a citation


def test_a_part_of_stop_words_alone_is_not_answered() -> None:
    # `part_terms` keeps no stop word, so "is it?" has no weights; even a threshold any
    # coverage meets must not let a message answer it.
    wordless = PartTerms("is it", {}, ())
    result = answer_part("is it", [hit("a", "is it done", 1)], wordless, 0.0, 4, False)
    assert not result.supported and result.evidence == []
    assert result.answer.startswith("the question has no content words")
    answered = _assemble("is it?", [result], "build-1", _response(), 0.0, wordless=True)
    assert answered.verdict == "insufficient_evidence" and answered.citations == []
    assert "no content words" in answered.answer and "does not answer" in answered.answer


def test_a_part_shows_no_more_messages_than_max_evidence_leaves() -> None:
    part = terms("pilot", "sync")
    hits = [
        hit("new", "Update: pilot sync moved to Wednesday 16:00.", 200),
        hit("old", "Pilot sync is Wednesday 10:00.", 100),
    ]
    # Unbounded, a correction cites both messages even beyond the part's share.
    both = answer_part("pilot sync", hits, part, 0.5, room=1, multi=False)
    assert [item.document_id for item in both.evidence] == ["new", "old"]
    # One message left: the correction alone, the conflict still named.
    one = answer_part("pilot sync", hits, part, 0.5, room=1, multi=False, left=1)
    assert [item.document_id for item in one.evidence] == ["new"]
    assert one.answer == (
        "Update: pilot sync moved to Wednesday 16:00. [new] "
        "(this corrects an earlier message; max_evidence is spent)"
    )
    assert one.conflict is not None and one.conflict.startswith(
        "new (t200) corrects the earlier old"
    )
    # None left: not answered, and the line says why.
    none = answer_part("pilot sync", hits, part, 0.5, room=1, multi=True, left=0)
    assert not none.supported and none.evidence == [] and none.strength == 1.0
    assert none.answer == (
        "pilot sync: not answered (the earlier parts used every message max_evidence allows)."
    )
    # The share still bounds the extra messages shown.
    plain = [hit("a", "pilot sync", 1), hit("b", "pilot sync notes", 2), hit("c", "sync", 3)]
    shown = answer_part("pilot sync", plain, part, 0.5, room=2, multi=False, left=5)
    assert [item.document_id for item in shown.evidence] == ["a", "b"]


def test_a_cited_lead_holding_none_of_the_questions_words_gets_a_note() -> None:
    # "When is Zoë on leave?" cited the team dinner while another hit held the words: citing
    # that one measured worse (docs/evaluation.md), so the answer says what it rests on.
    part = terms("leave")
    hits = [hit("dinner", "the team dinner is Tuesday", 2), hit("away", "Zoë on leave May 3", 1)]
    wordless = answer_part("when is Zoë on leave", hits, part, 0.5, room=4, multi=False)
    worded = answer_part("when is Zoë on leave", hits[::-1], part, 0.5, room=4, multi=False)
    assert wordless.supported and worded.supported
    notes = _assemble("q", [wordless, worded], "build-1", _response(), 0.0).notes
    assert notes == [
        "'when is Zoë on leave': the message cited first holds none of the question's words "
        "(coverage 0); read the evidence before relying on it"
    ]
