"""The large judged set: worded apart from its messages, evidence known by construction."""

import hashlib
import re
import zipfile
from collections import Counter
from pathlib import Path

import orjson
import pytest
import yaml

from slackquery.evaluation.queries import load_queries
from slackquery.sample import generate_sample, judged, planted
from slackquery.sample.judged import (
    ATTRIBUTE_BY_NAME,
    ATTRIBUTES,
    CURRENT_FRAMES,
    IDENTIFIER_SUBJECT,
    MULTIPART_FRAMES,
    build_judged_set,
    content_words,
)

SLOT = re.compile(r"\{[a-z]+\}", re.IGNORECASE)


def _words(templates: list[str]) -> set[str]:
    return set().union(*(content_words(SLOT.sub(" ", template)) for template in templates))


def _states(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


@pytest.fixture(scope="module")
def judged_set() -> judged.JudgedSet:
    return build_judged_set(7)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The documented size: 20,000 messages with the judged set planted."""
    out = tmp_path_factory.mktemp("judged") / "sample.zip"
    return out, generate_sample(out, messages=20_000, seed=7, judged_set=True)


def test_question_templates_share_no_content_word_with_message_templates() -> None:
    messages = [
        template
        for attribute in ATTRIBUTES
        for template in (*attribute.say, attribute.update, attribute.ask, attribute.reply)
    ]
    messages += [attribute.foreign[1] for attribute in ATTRIBUTES if attribute.foreign]
    messages += judged.SIDE_REPLIES
    questions = [
        template
        for attribute in ATTRIBUTES
        for template in (attribute.question, attribute.earlier, attribute.clause)
    ]
    questions += [*CURRENT_FRAMES, *MULTIPART_FRAMES, IDENTIFIER_SUBJECT]
    assert _words(messages) & _words(questions) == set()


def test_questions_share_only_the_subject_with_their_evidence(judged_set) -> None:
    by_key = {message.key: message for message in judged_set.messages}
    for question in judged_set.questions:
        evidence = [by_key[key].text for group in question.groups for key in group]
        shared = content_words(question.text) & set().union(*map(content_words, evidence))
        assert shared <= question.allowed, (question.id, question.text, shared)
        # The allowed words are only the service name or the ticket key.
        assert all(word.isalpha() for word in question.allowed)
        assert len(question.allowed) <= 1


def test_sizes_and_kinds(judged_set) -> None:
    kinds = Counter(question.kind for question in judged_set.questions)
    answerable = sum(count for kind, count in kinds.items() if kind != "unanswerable")
    assert answerable >= 200
    assert kinds["unanswerable"] == 20
    for kind in (
        "paraphrase",
        "crosslingual",
        "temporal-current",
        "temporal-earlier",
        "identifier",
        "thread-reply",
        "multipart",
    ):
        assert kinds[kind] >= 20, kinds


def test_evidence_is_what_the_template_planted(judged_set) -> None:
    by_key = {message.key: message for message in judged_set.messages}
    facts = {fact.id: fact for fact in judged_set.facts}
    for question in judged_set.questions:
        for group, fact_id in zip(question.groups, question.facts, strict=True):
            fact = facts[fact_id]
            attribute = ATTRIBUTE_BY_NAME[fact.attribute]
            value = fact.earlier_value if question.kind == "temporal-earlier" else fact.value
            for key in group:
                text = by_key[key].text
                assert _states(text, value), (question.id, text)
                if question.kind == "thread-reply":
                    # The answer never names the service; its thread root does.
                    assert fact.service not in text
                    assert by_key[key].parent == fact.roles["root"][0]
                    assert fact.service in by_key[by_key[key].parent].text
                else:
                    assert fact.service in text
                if question.kind == "crosslingual":
                    assert text == judged._fill(attribute.foreign[1], fact.service, value)
                if question.kind == "identifier":
                    assert text.startswith(f"{fact.identifier}: ")
                    assert fact.identifier in question.text and fact.service not in question.text
        if question.kind.startswith("temporal"):
            fact = facts[question.facts[0]]
            earlier = by_key[fact.roles["earlier"][0]]
            later = by_key[fact.roles["statement"][0]]
            assert earlier.ts_us < later.ts_us and fact.earlier_value != fact.value
            assert not _states(earlier.text, fact.value)


def test_unanswerable_questions_have_no_fact_by_construction(judged_set) -> None:
    planted_pairs = {(fact.service, fact.attribute) for fact in judged_set.facts}
    questions = {attribute.name: attribute.question for attribute in ATTRIBUTES}
    for question in judged_set.questions:
        if question.kind != "unanswerable":
            continue
        assert question.groups == () and question.relevant == ()
        matches = [
            (service, name)
            for service in (*judged.SERVICES, *judged.ABSENT_SERVICES)
            for name, template in questions.items()
            if question.text == judged._fill(template, service)
        ]
        assert len(matches) == 1 and matches[0] not in planted_pairs, question.text


def test_same_seed_same_set_other_seed_other_set() -> None:
    first, again, other = build_judged_set(3), build_judged_set(3), build_judged_set(4)
    assert first == again
    assert [q.text for q in first.questions] != [q.text for q in other.questions]


def test_workspace_holds_every_evidence_message_and_nothing_else_names_them(
    workspace, judged_set
) -> None:
    out, summary = workspace
    assert summary["messages"] == 20_000
    assert summary["judged_answerable"] >= 200 and summary["judged_unanswerable"] == 20
    names = "|".join(s.lower() for s in (*judged.SERVICES, *judged.ABSENT_SERVICES))
    mention = re.compile(rf"\b({names}|{judged.IDENTIFIER_PREFIX.lower()}-\d+)\b", re.IGNORECASE)
    planted_ts = {message.ts: message for message in judged_set.messages}
    found = {}
    with zipfile.ZipFile(out) as archive:
        for name in archive.namelist():
            if "/" not in name:
                continue
            for message in orjson.loads(archive.read(name)):
                item = planted_ts.get(message["ts"])
                if item is not None:
                    found[item.key] = (name.split("/")[0], message)
                else:
                    assert not mention.search(message.get("text", "")), message["text"]
    for item in judged_set.messages:
        folder, message = found[item.key]
        assert folder == item.channel and message["text"] == item.text
        if item.parent:
            assert message["thread_ts"] == next(
                m.ts for m in judged_set.messages if m.key == item.parent
            )
    queries = load_queries(summary["judged_path"])
    ids = {message.message_id for message in judged_set.messages}
    for query in queries:
        assert query.evidence_ids <= ids and set(query.relevant) <= ids
    # The plain sample's queries are unchanged by the judged set.
    plain = yaml.safe_load(Path(summary["queries_path"]).read_text(encoding="utf-8"))
    assert [entry["query"] for entry in plain["queries"]] == [q.query for q in planted.QUERIES]


def test_plain_sample_is_unchanged_without_the_flag(tmp_path: Path) -> None:
    # The 600-message sample's digest before the judged set existed (main at 3137355).
    summary = generate_sample(tmp_path / "a.zip", messages=600, seed=7)
    digest = hashlib.sha256((tmp_path / "a.zip").read_bytes()).hexdigest()
    assert digest == "0179ff93d92832091ad68725fe89a2aecfb71293aaca96231141d407ce6dba58"
    assert "judged_path" not in summary and not (tmp_path / "a.judged.yaml").exists()
    assert summary["planted_messages"] == len(planted.MESSAGES)
