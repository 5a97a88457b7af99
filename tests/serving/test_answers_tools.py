"""Answers and citation checks on the real test artifact, through the engine, the official MCP
client (Streamable HTTP and stdio) and the CLI."""

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import duckdb
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

import serving.answers
from serving.access import Requester
from serving.answer_tools import register_answer_tools
from serving.answers import answer_question, verify_citations
from serving.budget import BudgetExceeded, Deadline
from serving.engine import SearchEngine
from serving.metrics import Metrics
from serving.tools import ToolRunner
from slackquery.artifacts.files import artifact_file, is_build_id
from slackquery.artifacts.publish import publish
from slackquery.cli import main
from slackquery.commands.verify import UNVERIFIED_EXIT
from slackquery.errors import SlackqueryError
from slackquery.evaluation.runner import prepare_corpus
from slackquery.settings import Settings
from tests.canonical.test_importer import BEACON_LINES, write_beacon

from .conftest import Pipeline
from .slack_export import ACME, ZEBRA, message_id
from .test_mcp import ROOT, call, http_server, run_client

PASSWORD = message_id(6, "C2")  # "28P01 means invalid password; rotate the credentials in vault"
QUESTION = "What should we rotate after a 28P01 invalid password error?"
UNANSWERABLE = "What is the zqvorp blixtran wobbuzz?"


def test_answer_cites_the_evidence_and_verifies(engine: SearchEngine) -> None:
    answer = answer_question(engine, QUESTION)
    assert answer.verdict == "answered"
    assert PASSWORD in {citation.document_id for citation in answer.citations}
    assert f"[{PASSWORD}]" in answer.answer
    evidence = answer.parts[0].evidence[0]
    assert evidence.sentence in evidence.text and f"**{evidence.sentence}**" in evidence.highlighted
    checked = verify_citations(engine, answer.answer, answer.artifact_id)
    assert checked.verdict == "verified", checked


def test_evidence_names_the_files_its_message_carries(engine: SearchEngine) -> None:
    answer = answer_question(engine, "Where are the weekend hiking trip photos?")
    evidence = {item.document_id: item for part in answer.parts for item in part.evidence}
    photos = evidence[message_id(27, "C3")]
    assert [(file.file_id, file.name) for file in photos.files] == [("F0TRAIL", "trail-map.pdf")]


def test_a_reply_in_the_evidence_carries_the_message_it_answers(engine: SearchEngine) -> None:
    answer = answer_question(engine, "How much space is free after cleaning docker images?")
    evidence = {item.document_id: item for part in answer.parts for item in part.evidence}
    reply = evidence[message_id(18)]  # "Cleaned old docker images on staging, 40% free now"
    assert reply.in_reply_to is not None
    assert reply.in_reply_to.document_id == message_id(17)
    assert reply.in_reply_to.text == "The staging cluster is out of disk space again"
    root = evidence.get(message_id(17))
    assert root is None or root.in_reply_to is None  # a thread's first message replies to none


def test_unanswerable_abstains_and_a_partial_names_the_missing_part(engine: SearchEngine) -> None:
    none = answer_question(engine, UNANSWERABLE)
    assert none.verdict == "insufficient_evidence" and none.citations == []
    assert verify_citations(engine, none.answer).verdict == "verified"  # says evidence is missing
    partial = answer_question(engine, f"{QUESTION} {UNANSWERABLE}")
    assert partial.verdict == "partial"
    assert partial.unsupported_parts == [UNANSWERABLE.removesuffix("?")]


def test_parts_beyond_the_cap_are_named_as_not_answered(engine: SearchEngine) -> None:
    cap = engine.settings.search_max_query_parts
    extra = ["what about the zebra", "what about the narwhal"]
    asked = [QUESTION.removesuffix("?")] + [f"what about topic{n}" for n in range(cap - 1)]
    answer = answer_question(engine, ", ".join(asked + extra) + "?")
    assert [part.part for part in answer.parts][cap:] == extra
    assert answer.verdict == "partial"
    assert set(extra) <= set(answer.unsupported_parts)
    assert f"answered in at most {cap} parts" in answer.answer


def test_a_question_of_operators_alone_is_refused(engine: SearchEngine) -> None:
    # search lists such a query's messages newest first; as a question it asks nothing
    for question in ("in:#eng", "from:@bob.smith on:2024-03-01", "?"):
        with pytest.raises(SlackqueryError, match="question has no searchable text"):
            answer_question(engine, question)


def test_verify_finds_every_kind_of_citation(engine: SearchEngine) -> None:
    found = engine.get_message(PASSWORD).messages[0]
    draft = (
        f"It means an invalid password [{PASSWORD}], see {found.permalink}; "
        f"also [T0ACME:C1:1.000000] and {message_id(7, 'C3')}. Markdown [link](http://e.com)."
    )
    result = verify_citations(engine, draft)
    kinds = {(check.kind, check.document_id, not check.problems) for check in result.citations}
    assert kinds == {
        ("document_id", PASSWORD, True),
        ("permalink", PASSWORD, True),
        ("document_id", message_id(7, "C3"), True),  # a bare id (here source id = document id)
        ("document_id", None, False),
    }
    assert result.verdict == "unverified"
    # The top-level problems were empty here; an agent reading them saw nothing wrong.
    assert result.problems == ["1 of 4 citations failed a check (see citations)"]
    assert result.uncited_sentences == ["Markdown [link](http://e.com)."]
    assert verify_citations(engine, "Rotate the credentials.").verdict == "unverified"
    # A thread's context document exists in the artifact, but no reader can open it.
    with engine.artifact() as artifact:
        context = next(doc for doc in artifact.document_ids if doc.startswith("thread:"))
    cited, made_up = (verify_citations(engine, f"x [{doc}]") for doc in (context, "thread:W:C:1"))
    assert cited.verdict == "unverified"
    assert cited.citations[0].model_dump(exclude={"cited"}) == made_up.citations[0].model_dump(
        exclude={"cited"}
    )


def test_bracketed_prose_is_no_citation(engine: SearchEngine) -> None:
    # `[UTC]` counted as a made-up citation and failed a draft whose one citation held.
    draft = f"Rotate it [{PASSWORD}] (as of 12:00 [UTC], see [ERR-311] and [sic])."
    result = verify_citations(engine, draft)
    assert [check.cited for check in result.citations] == [PASSWORD]
    assert result.verdict == "verified"
    for made_up in ("T0ACME:C1:1.000000", "C1:1709280000.000000", "1709280000.000009"):
        checked = verify_citations(engine, f"{draft} Also [{made_up}].")
        assert checked.verdict == "unverified", made_up


def test_verify_against_the_artifact_it_was_cited_from(
    publishable: Settings, pipeline: Pipeline
) -> None:
    zebra = message_id(ZEBRA.index)
    publish(publishable, pipeline.second_build)
    engine = SearchEngine(publishable)
    try:
        same = verify_citations(engine, f"x [{PASSWORD}]", pipeline.first_build)
        assert same.verdict == "verified" and same.citations[0].unchanged is True
        newer = verify_citations(engine, f"x [{zebra}]", pipeline.first_build)
        assert newer.citations[0].problems == ["not in the artifact it was cited from"]
        gone = verify_citations(engine, f"x [{PASSWORD}]", "20240101T000000Z-00000000-00000000")
        assert gone.verdict == "unverified"
        assert "is not on disk (removed by retention, or never built)" in gone.problems[0]
        junk = verify_citations(engine, f"x [{PASSWORD}]", "no-such-build")
        assert junk.verdict == "unverified" and "is not a build id" in junk.problems[0]
        # Whether a text changed cannot be told: no citation reads "ok" beside the verdict.
        assert junk.citations[0].problems == [
            "whether its text changed is unknown: its artifact cannot be read"
        ]
        assert gone.citations[0].problems == junk.citations[0].problems
        # A draft that cites nothing is still checked against the id it names.
        none = verify_citations(engine, "The archive does not answer this.", "no-such-build")
        assert none.verdict == "unverified" and "is not a build id" in none.problems[0]
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("draft", "verdict"),
    [
        ("The archive does not answer this.", "verified"),
        ("No message says. I couldn't find it in Slack either.", "verified"),
        # A claim beside such a sentence is still a claim without a citation.
        ("The export cap is 50,000 rows. I couldn't find anything about more.", "unverified"),
        ("José drives the upgrade.\nThere is no message saying otherwise.", "unverified"),
        ("José drives the upgrade.", "unverified"),
    ],
)
def test_a_draft_without_citations_is_verified_only_when_all_of_it_says_so(
    engine: SearchEngine, draft: str, verdict: str
) -> None:
    assert verify_citations(engine, draft).verdict == verdict


def test_a_question_of_stop_words_alone_abstains(engine: SearchEngine) -> None:
    # Search falls back to the stop words to have something to look for; an answer must
    # not, or the first message with "is" in it would answer "is it?".
    for question in ("the and of is a to", "is it?"):
        answer = answer_question(engine, question)
        assert answer.verdict == "insufficient_evidence" and answer.citations == []
        assert "no content words" in answer.answer, question
        assert verify_citations(engine, answer.answer).verdict == "verified"


def test_a_question_that_cannot_be_asked_is_named_as_the_question(engine: SearchEngine) -> None:
    limit = engine.settings.search_max_query_chars
    with pytest.raises(SlackqueryError, match=f"^question is {limit + 1} characters; the max"):
        answer_question(engine, "x" * (limit + 1))  # the search said "query is ..."
    with pytest.raises(SlackqueryError, match="only operators or punctuation"):
        answer_question(engine, "?")


def test_max_evidence_bounds_the_messages_of_all_parts(engine: SearchEngine) -> None:
    question = (
        "What should we rotate after a 28P01 invalid password error, what did cert-manager "
        "renew, and why did the Kafka consumer lag spike?"
    )
    full = answer_question(engine, question)
    assert full.verdict == "answered" and len(full.parts) == 3
    assert [len(part.evidence) for part in full.parts] == [4, 4, 4]  # 12 // 3 each
    for cap in (1, 2, 3, 4):
        answer = answer_question(engine, question, max_evidence=cap)
        assert sum(len(part.evidence) for part in answer.parts) <= cap, cap
    # One message: the first part takes it; the others say why they are not answered.
    one = answer_question(engine, question, max_evidence=1)
    assert one.verdict == "partial"
    assert [part.supported for part in one.parts] == [True, False, False]
    assert all("max_evidence allows" in part.answer for part in one.parts[1:])
    assert [citation.document_id for citation in one.citations] == [
        full.parts[0].evidence[0].document_id
    ]


class _Recording:
    """A DuckDB connection that records the ids each of its queries looks up."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, looked_up: list[list[str]]):
        self.connection = connection
        self.looked_up = looked_up

    def __enter__(self) -> "_Recording":
        return self

    def __exit__(self, *_: object) -> None:
        self.connection.close()

    def execute(
        self, query: str, parameters: dict[str, Any] | None = None
    ) -> duckdb.DuckDBPyConnection:
        if parameters and "ids" in parameters:
            self.looked_up.append(list(parameters["ids"]))
        return self.connection.execute(query, parameters)


def _record_cited_at_lookups(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ids verify_citations looks up in the artifact a draft was cited from."""
    looked_up: list[list[str]] = []

    def connect(path: str, read_only: bool) -> _Recording:
        return _Recording(duckdb.connect(path, read_only=read_only), looked_up)

    spy = SimpleNamespace(connect=connect, Error=duckdb.Error)
    monkeypatch.setattr(serving.answers, "duckdb", spy)
    return looked_up


def test_a_requester_hears_of_a_deletion_only_for_what_they_saw_when_it_was_cited(
    published: Settings, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `first` is published. `second` also holds ZEBRA (public #eng), so a draft cited from
    # it cites a message deleted since; and there Chen is a member of #secret-plans, which
    # Zoë never is.
    engine = SearchEngine(published)
    zebra, private, made_up = message_id(ZEBRA.index), message_id(41, "G1"), message_id(99, "G1")
    chen, zoe = Requester("U3", ACME), Requester("U4", ACME)
    looked_up = _record_cited_at_lookups(monkeypatch)
    try:
        for requester in (None, chen, zoe):
            gone = verify_citations(
                engine, f"x [{zebra}]", pipeline.second_build, requester=requester
            )
            assert gone.citations[0].problems == ["deleted or emptied since it was cited"]
        # Chen could read the private message in the build it was cited from.
        lost = verify_citations(engine, f"x [{private}]", pipeline.second_build, requester=chen)
        assert lost.citations[0].problems == ["deleted or emptied since it was cited"]
        # Zoë never could: it reads as a made-up id, and the older build is not even asked
        # about it (the same query, with no id, for both), so neither does its timing differ.
        looked_up.clear()
        hidden, absent = (
            verify_citations(engine, f"x [{doc}]", pipeline.second_build, requester=zoe)
            for doc in (private, made_up)
        )
        assert looked_up == [[], []]
        assert hidden.citations[0].problems == ["no such message in the current artifact"]
        assert hidden.model_dump(exclude={"citations": {0: {"cited"}}}) == absent.model_dump(
            exclude={"citations": {0: {"cited"}}}
        )
    finally:
        engine.close()


def test_a_source_id_that_is_no_document_id_is_resolved_by_its_lookup(
    settings: Settings, tmp_path: Path
) -> None:
    # Beacon's source ids (`synthetic:eng:2`) are not its document ids; a Slack export's
    # are, and there verify skips the lookup (the test artifact, below).
    prepare_corpus(settings, write_beacon(tmp_path / "corpus.jsonl", BEACON_LINES))
    engine = SearchEngine(settings)
    try:
        with engine.artifact() as artifact:
            assert not artifact.source_ids_are_document_ids
        result = verify_citations(engine, "A reply [synthetic:eng:2].")
        assert result.verdict == "verified"
        assert [check.kind for check in result.citations] == ["source_message_id"]
    finally:
        engine.close()


def test_verify_against_the_current_artifact_reads_no_other_file(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usual case: an answer cited from the artifact still published. Its texts are the
    # ones verify already read, so the file is not opened a second time.
    looked_up = _record_cited_at_lookups(monkeypatch)
    with engine.artifact() as artifact:
        current = artifact.build_id
        assert artifact.source_ids_are_document_ids  # a Slack export's are
    result = verify_citations(engine, f"x [{PASSWORD}]", current)
    assert result.verdict == "verified" and result.citations[0].unchanged is True
    assert looked_up == []


# What `problems` adds when the one citation of a draft failed a check of its own.
FAILED_ONE = "1 of 1 citations failed a check (see citations)"


def test_a_cited_at_artifact_that_cannot_be_read_is_one_problem(
    published: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt, other_schema, removed = (f"20200101T000000Z-00000000-0000000{n}" for n in (1, 2, 3))
    folder = published.artifact_path
    artifact_file(folder, corrupt).write_bytes(b"not a duckdb file" * 100)
    with duckdb.connect(str(artifact_file(folder, other_schema))) as connection:
        connection.execute("create table search_documents (document_id varchar, body varchar)")
    artifact_file(folder, removed).write_bytes(b"")
    assert main(["verify", "--cited-at", corrupt, f"x [{PASSWORD}]"]) == UNVERIFIED_EXIT
    assert f"problem: cannot read artifact {corrupt}: " in capsys.readouterr().out
    engine = SearchEngine(published)
    try:
        for build_id in (corrupt, other_schema):
            for requester in (None, Requester("U3", ACME)):
                checked = verify_citations(engine, f"x [{PASSWORD}]", build_id, requester=requester)
                assert checked.verdict == "unverified" and checked.problems[1:] == [FAILED_ONE]
                assert checked.problems[0].startswith(f"cannot read artifact {build_id}: ")
                assert str(folder) not in checked.problems[0]  # no server path
        # Retention removes the file between the existence check and the open.
        real_connect = duckdb.connect

        def connect_after_retention(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
            Path(path).unlink()
            return real_connect(path, read_only=read_only)

        spy = SimpleNamespace(connect=connect_after_retention, Error=duckdb.Error)
        monkeypatch.setattr(serving.answers, "duckdb", spy)
        checked = verify_citations(engine, f"x [{PASSWORD}]", removed)
        assert checked.problems == [
            f"artifact {removed} is not on disk (removed by retention, or never built); "
            "cannot tell whether cited text changed",
            FAILED_ONE,
        ]
    finally:
        engine.close()


def test_a_build_id_with_a_trailing_newline_is_no_build_id(
    engine: SearchEngine, pipeline: Pipeline
) -> None:
    assert is_build_id(pipeline.first_build)
    assert not is_build_id(pipeline.first_build + "\n")
    checked = verify_citations(engine, f"x [{PASSWORD}]", pipeline.first_build + "\n")
    assert checked.verdict == "unverified" and "is not a build id" in checked.problems[0]


def test_only_the_permalink_itself_and_no_link_text_is_a_citation(engine: SearchEngine) -> None:
    link = engine.get_message(PASSWORD).messages[0].permalink
    assert link is not None and ".slack.com/archives/" in link
    host = link.split("/")[2]
    good = [
        f"see [{PASSWORD}]",
        f"see {PASSWORD}.",
        f"see {link}",
        f"see ({link}).",
        f"see <{link}|the message>",
        f"see [the message]({link})",
        f"see [{link}]",
        f"see {link}?thread_ts=1.000000&cid=C2",
    ]
    for draft in good:
        checked = verify_citations(engine, draft)
        assert checked.verdict == "verified", draft
        assert [check.document_id for check in checked.citations] == [PASSWORD], draft
    look_alike = link.replace(host, f"{host}.evil.example")
    wrapped = f"https://evil.example/?next={link}"
    for url in (look_alike, wrapped):
        # Beside a good citation, the unknown permalink still fails the draft.
        checked = verify_citations(engine, f"see [{PASSWORD}] and {url}")
        assert checked.verdict == "unverified", url
        assert [(check.kind, check.document_id) for check in checked.citations] == [
            ("document_id", PASSWORD),
            ("permalink", None),
        ]
        assert checked.citations[1].cited == url
    # A Markdown link's text is no citation, whatever it looks like.
    masked = verify_citations(engine, f"see [{PASSWORD}](https://evil.example)")
    assert masked.verdict == "unverified" and masked.citations == []


def test_verify_checks_its_deadline_between_citations(engine: SearchEngine) -> None:
    readings = iter([0.0, 0.0, 0.0])  # made, the first two citations; later readings: 99 s

    def clock() -> float:
        return next(readings, 99.0)

    draft = " ".join(f"[{message_id(index)}]" for index in range(5))
    with pytest.raises(BudgetExceeded, match="time budget before checking the next citation"):
        verify_citations(engine, draft, deadline=Deadline(5.0, clock))


def test_answer_checks_its_deadline_between_stages(engine: SearchEngine) -> None:
    readings = iter([0.0, 0.0])  # made, first arm's check; every later reading is 99 s on

    def clock() -> float:
        return next(readings, 99.0)

    with pytest.raises(BudgetExceeded, match=r"time budget before the \w+ arm"):
        answer_question(engine, QUESTION, deadline=Deadline(5.0, clock))


def answer_tools(engine: SearchEngine, runner: ToolRunner) -> dict[str, Any]:
    """The answer tools' functions by tool name, as `register_answer_tools` adds them."""
    tools: dict[str, Any] = {}

    class Recorder:
        def add_tool(self, tool: Any, name: str | None = None, **_: Any) -> None:
            tools[name or tool.__name__] = tool

        def prompt(self, **_: Any) -> Any:
            return lambda function: function

    register_answer_tools(Recorder(), engine, runner)  # type: ignore[arg-type]
    return tools


def test_the_answer_tool_hands_its_call_budget_to_the_search(engine: SearchEngine) -> None:
    readings = iter([0.0, 0.0, 0.0])  # made, the call's start, first arm's check
    runner = ToolRunner(engine.settings, Metrics(), clock=lambda: next(readings, 99.0))
    tools = answer_tools(engine, runner)
    with pytest.raises(ToolError, match=r"time budget before the \w+ arm"):
        anyio.run(tools["answer_slack_question"], QUESTION)
    assert runner.in_flight == 0
    readings = iter([0.0, 0.0])  # the call's start, the first citation's check
    with pytest.raises(ToolError, match="time budget before checking the next citation"):
        anyio.run(tools["verify_citations"], f"[{PASSWORD}] [{message_id(7, 'C3')}]")
    assert runner.in_flight == 0


def test_verify_lists_the_checks_that_fit_the_response_budget(published: Settings) -> None:
    narrow = published.model_copy(update={"serve_max_response_chars": 8_000})
    engine = SearchEngine(narrow)
    try:
        verify = answer_tools(engine, ToolRunner(narrow, Metrics()))["verify_citations"]
        made_up = " ".join(f"[{ACME}:C1:{1700000000 + index}.000000]" for index in range(200))
        cut = anyio.run(verify, made_up)
        fits = anyio.run(verify, f"[{PASSWORD}] and [{message_id(7, 'C3')}]")
    finally:
        engine.close()
    kept = len(cut.citations)
    assert 0 < kept < 200 and cut.verdict == "unverified"
    assert sum(len(check.model_dump_json()) + 1 for check in cut.citations) <= 8_000
    assert cut.problems == [
        "200 of 200 citations failed a check (see citations)",
        f"the draft cites 200 messages, more than the {kept} whose checks fit in 8,000 "
        "characters (SLACKQUERY_SERVE_MAX_RESPONSE_CHARS): only those are listed; verify the "
        f"draft in parts of at most {kept} citations",
    ]
    assert fits.verdict == "verified" and len(fits.citations) == 2 and fits.problems == []


def test_tools_and_prompt_over_http(engine: SearchEngine, published: Settings) -> None:
    limit = published.search_max_query_chars

    async def body(client: Client) -> tuple[Any, ...]:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        answer = await call(client, "answer_slack_question", question=QUESTION, max_evidence=4)
        checked = await call(
            client,
            "verify_citations",
            text=answer["answer"],
            cited_at_artifact=answer["artifact_id"],
        )
        bad = await call(client, "answer_slack_question", question=QUESTION, max_evidence=0)
        kinds = [
            await call(client, "answer_slack_question", question=QUESTION, conversation_types=kind)
            for kind in (["public"], ["dm"], ["channel"])
        ]
        not_counts = [
            await call(client, "answer_slack_question", question=QUESTION, max_evidence=value)
            for value in (True, "3")
        ]
        prompt = await client.get_prompt("answer_from_slack", {"question": "who broke prod?"})
        prompts = {item.name: item for item in (await client.list_prompts()).prompts}
        refused = []
        for name, arguments in (
            ("answer_from_slack", {"question": "x" * (limit + 1)}),
            ("answer_from_slack", {"question": " "}),
            ("answer_from_slak", {"question": "who?"}),
            ("answer_from_slack", {}),
            ("answer_from_slack", {"question": "who?", "channel": "C1"}),
        ):
            with pytest.raises(MCPError) as error:
                await client.get_prompt(name, arguments)
            refused.append(error.value)
        return tools, answer, checked, bad, kinds, not_counts, prompt, prompts, refused

    with http_server(published, engine) as url:
        tools, answer, checked, bad, kinds, not_counts, prompt, prompts, refused = run_client(
            url, body
        )
    assert {"answer_slack_question", "verify_citations"} <= set(tools)
    assert tools["answer_slack_question"].output_schema is not None
    assert tools["answer_slack_question"].input_schema["properties"]["max_evidence"] == {
        "default": 12,
        "title": "Max Evidence",
        "type": "integer",
        "minimum": 1,
        "maximum": published.search_max_results,
        "description": "Messages of evidence over all parts of the question, "
        f"1-{published.search_max_results}. Default: 12.",
    }
    assert answer["verdict"] == "answered" and answer["citations"]
    assert checked["verdict"] == "verified"
    assert bad.startswith("ERROR") and "max_evidence must be between 1 and" in bad
    # Kept to the kinds of conversation named, as search_slack's filter keeps them: the
    # answer sits in a public channel.
    public_only, dms_only, unknown_kind = kinds
    assert PASSWORD in {citation["document_id"] for citation in public_only["citations"]}
    assert dms_only["verdict"] == "insufficient_evidence" and not dms_only["citations"]
    assert unknown_kind.startswith("ERROR") and "conversation_types" in unknown_kind
    assert all(error.startswith("ERROR") and "max_evidence" in error for error in not_counts)
    text = prompt.messages[0].content.text
    assert "who broke prod?" in text and "verify_citations" in text
    (argument,) = prompts["answer_from_slack"].arguments or []
    assert argument.required and f"1 to {limit} characters" in (argument.description or "")
    # Invalid params, each named, as the spec asks (the SDK says "Internal server error").
    assert [(error.code, error.message) for error in refused] == [
        (INVALID_PARAMS, f"question is {limit + 1} characters; the maximum is {limit}"),
        (INVALID_PARAMS, "question must not be empty"),
        (INVALID_PARAMS, "unknown prompt 'answer_from_slak'"),
        (INVALID_PARAMS, "answer_from_slack needs the argument question"),
        (INVALID_PARAMS, "answer_from_slack takes no argument 'channel'"),
    ]


def test_tools_over_stdio(published: Settings) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLACKQUERY_")}
    env["SLACKQUERY_HOME"] = str(published.home)
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "serving", "--stdio"], env=env, cwd=str(ROOT)
    )

    async def main_() -> tuple[Any, Any]:
        async with Client(parameters) as client:
            answer = await call(client, "answer_slack_question", question=UNANSWERABLE)
            checked = await call(client, "verify_citations", text=f"see [{PASSWORD}]")
            return answer, checked

    answer, checked = anyio.run(main_)
    assert answer["verdict"] == "insufficient_evidence"
    assert checked["verdict"] == "verified"


def test_ask_and_verify_commands(published: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", QUESTION, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "answered"
    assert {"document_id", "source_message_id"} <= set(document["citations"][0])
    assert document["parts"][0]["part"]
    assert main(["ask", QUESTION]) == 0
    text = capsys.readouterr().out
    assert text.startswith("answered: ") and f"[{PASSWORD}]" in text and "sources:" in text
    assert main(["ask", "How much space is free after cleaning docker images?"]) == 0
    assert "in reply to " in capsys.readouterr().out
    assert main(["verify", f"see [{PASSWORD}]"]) == 0
    assert "verified against artifact" in capsys.readouterr().out
    assert main(["verify", "see [T0ACME:C1:1.000000]"]) == UNVERIFIED_EXIT


def test_verify_keeps_its_status_when_its_reader_went_away(
    published: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `verify "$draft" | grep -q …` under pipefail: a reader that stopped early turned the
    # unverified draft's exit status into 0.
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as gone:
        monkeypatch.setattr(sys, "stdout", gone)
        assert main(["verify", "see [T0ACME:C1:1.000000]"]) == UNVERIFIED_EXIT


def _judged_file(path: Any, *queries: tuple[str, str, list[str]]) -> str:
    """A judged query file: (id, question, evidence ids); no evidence means unanswerable."""
    entries = [
        {
            "id": query_id,
            "query": question,
            "split": "dev",
            "answerable": bool(evidence),
            "evidence_groups": [{"part": "p1", "message_ids": evidence}] if evidence else [],
            "relevant": {message: 3 for message in evidence},
        }
        for query_id, question, evidence in queries
    ]
    path.write_text(json.dumps({"queries": entries}), encoding="utf-8")
    return str(path)


def test_eval_answers_saves_rows_and_compares_two_runs(
    published: Settings, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _judged_file(tmp_path / "first.yaml", ("a1", QUESTION, [PASSWORD]))
    second = _judged_file(
        tmp_path / "second.yaml", ("b1", QUESTION, [message_id(1)]), ("b2", UNANSWERABLE, [])
    )
    rows = tmp_path / "rows.jsonl"
    assert main(["eval", first, second, "--answers", "--rows", str(rows)]) == 0
    printed = capsys.readouterr().out
    assert "# first" in printed and "# second" in printed
    saved = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
    assert [(row["query_set"], row["id"]) for row in saved] == [
        ("first", "a1"),
        ("second", "b1"),
        ("second", "b2"),
    ]
    assert saved[0]["strict_hits"] == 1 and saved[1]["strict_hits"] == 0

    # B: the same run, except that b1 now cites its evidence and a1 abstains.
    changed = tmp_path / "changed.jsonl"
    b1 = {**saved[1], "cited": [message_id(1)], "strict_hits": 1, "groups_cited": 1}
    a1 = {**saved[0], "verdict": "insufficient_evidence", "cited": []}
    a1 |= {"strict_hits": 0, "lenient_hits": 0, "groups_cited": 0}
    lines = [json.dumps(row) for row in (a1, b1, saved[2])]
    changed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["eval", "--answers", "--compare", str(rows), str(changed), "--json", "-"]) == 0
    document = json.loads(capsys.readouterr().out)
    (comparison,) = document["comparisons"]
    assert comparison["changed"] == [["first", "a1"], ["second", "b1"]]
    pooled = comparison["intervals"]["pooled"]
    assert pooled["answer_rate"]["mean"] == pytest.approx(-0.5)
    assert pooled["part_coverage"]["mean"] == pytest.approx(0.0)  # a1 loses its group, b1 gains one
    assert comparison["intervals"]["second"]["strict_precision"]["mean"] == pytest.approx(1.0)
    assert pooled["correct_abstention"]["queries"] == 1

    retrieval = tmp_path / "retrieval.jsonl"
    retrieval.write_text(json.dumps({"query_set": "first", "query_id": "a1"}), encoding="utf-8")
    assert main(["eval", "--answers", "--compare", str(rows), str(retrieval)]) == 1
    assert "row 1 is not an answer row; write them with --answers --rows" in capsys.readouterr().err
