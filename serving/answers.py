"""Answers from retrieved messages only: evidence packs, extractive cited answers, abstention,
and citation checks of any drafted answer.

`answer_question` runs one hybrid search for the whole question, then, for each part of a
multi-part question, scores the retrieved messages by how much of the
part's content words they hold, weighted by rarity (BM25's idf over the artifact). That
*coverage* is the evidence strength: a part whose best message covers less than
`answer_min_coverage` (a setting calibrated on judged unanswerable questions, see
docs/evaluation.md) is unsupported, and a question with no supported part abstains. The
answer is built only from the answering sentences, each followed by `[document_id]`.

`verify_citations` re-reads every cited message from the current artifact before delivery:
it exists, the requester may see it, it is still active, and its text is what it was in the
artifact it was cited from.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import duckdb
import numpy as np

from serving.access import Requester, Visibility, channel_of, limit_of, may_see
from serving.answer_models import (
    AnswerPart,
    AnswerResponse,
    Citation,
    CitationCheck,
    Evidence,
    ThreadStart,
    VerificationResponse,
)
from serving.artifact import LoadedArtifact
from serving.budget import Deadline
from serving.engine import SearchEngine, cut_note, visible_frequency, visible_message_row
from serving.models import SearchHitBase, SearchRequest, SearchResponse
from serving.permalink import is_url
from serving.query import (
    STOPWORDS,
    answer_types,
    asks_a_question,
    fts_tokens,
    has_searchable_content,
    holds_answer_type,
    parse_query,
    query_aspects,
    stated_values,
    time_frames,
)
from slackquery.artifacts.files import artifact_file, is_build_id
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

# Whether the requester may see a message, by document id. The default sees everything;
# per-requester visibility (access control) plugs in here.

# Words a message uses when it takes back or replaces something said earlier.
CORRECTION_CUES = re.compile(
    r"\b(actually|instead|moved|moving|now|update[ds]?|correction|corrected|changed|"
    r"rescheduled|revised|no longer|scratch that|switch(?:ed|ing)?)\b",
    re.IGNORECASE,
)
# Sentence ends, or line breaks (Slack messages often list one point per line).
# A sentence ends at . ! or ? before a space, or at a line break; not after an initial
# ("@José N. drives the upgrade": cut there, the answer to "who" lost its name), "a.m.",
# "p.m.", "e.g.", "i.e." or "vs.".
_SENTENCE_BREAK = re.compile(
    r"(?<=[.!?])(?<!\b[A-Z]\.)(?<!\b[ap]\.m\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)\s+"
    r"|\s*\n+\s*"
)
# Words are compared by their first five letters, a crude stemmer: "mongo" meets "mongodb",
# "checked" meets "check", "migration" meets "migrate"; shorter words must match exactly.
STEM_CHARS = 5
# How much of a message an answer quotes when none of its sentences answers on its own.
QUOTE_CHARS = 300
# A link as Slack writes it, `<url>` or `<url|label>`: group 1 is the URL.
_SLACK_LINK = re.compile(r"<(https?://[^<>|\s]+)(?:\|[^<>]*)?>", re.IGNORECASE)
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")
# Uncited sentences a verification lists: enough to fix a draft by, in a bounded reply.
UNCITED_LISTED = 10
# Supporting messages kept per part beyond the one that answers (shown, not cited).
EXTRA_EVIDENCE = 2
# A message at least this close to the part's best coverage may replace it as a correction.
CORRECTION_MARGIN = 0.8
_MISSING_EVIDENCE = re.compile(
    r"does not answer|doesn't answer|no (?:supporting )?(?:evidence|message)|"
    r"insufficient evidence|could ?n[o']t find|not (?:found|mentioned|discussed) in",
    re.IGNORECASE,
)


def stem(token: str) -> str:
    """The comparison key of an FTS token (see `STEM_CHARS`)."""
    return token[:STEM_CHARS]


@lru_cache(maxsize=4096)
def stems(text: str) -> frozenset[str]:
    """The stems of a text's FTS tokens (cached: each hit is scored against every part)."""
    return frozenset(stem(token) for token in fts_tokens(text))


@dataclass(frozen=True)
class PartTerms:
    """A part's content words as stems, each weighted by its rarity in the artifact."""

    text: str
    weights: dict[str, float]
    kinds: tuple[str, ...]

    def coverage(self, text: str) -> float:
        """Share of the part's weight whose stems occur in `text` (0 when it has none)."""
        total = sum(self.weights.values())
        if not total:
            return 0.0
        present = stems(text)
        return sum(weight for key, weight in self.weights.items() if key in present) / total


def part_terms(artifact: LoadedArtifact, part: str, visible: Visibility | None = None) -> PartTerms:
    """Content words of `part` (stop words dropped; none when it has only stop words),
    weighted by idf; a word no message contains gets the highest idf, so it pulls strength
    down as the rarest word would.
    For a requester (`visible`), idf counts only the messages they may see, as search does
    (`visible_terms`): weights from every message would tell how often hidden ones use a
    word, and evidence strength would show it."""
    bm25 = artifact.bm25
    # Stop words only: search falls back to them (`content_tokens`), to have something to
    # look for; evidence must not, or any message with "is" in it would answer "is it?".
    tokens = [token for token in fts_tokens(part) if token not in STOPWORDS]
    term_ids = [bm25.term_ids.get(token) for token in tokens]
    if visible is None:
        ceiling = float(bm25.idf.max(initial=1.0))
        found = [None if term_id is None else float(bm25.idf[term_id]) for term_id in term_ids]
    else:
        counts = [
            0 if term_id is None else visible_frequency(artifact, visible, term_id)
            for term_id in term_ids
        ]
        idf = bm25.idf_of(np.array([1, *counts], dtype=np.float64), visible.document_count)
        ceiling = float(idf[0])  # a word in one message
        found = [
            float(weight) if count else None for weight, count in zip(idf[1:], counts, strict=True)
        ]
    weights: dict[str, float] = {}
    for token, weight in zip(tokens, found, strict=True):
        key = stem(token)
        weights[key] = max(weights.get(key, 0.0), ceiling if weight is None else weight)
    return PartTerms(part, weights, answer_types(part))


def sentences(text: str) -> list[str]:
    """The message's sentences (or lines), in order, blanks dropped."""
    return [piece.strip() for piece in _SENTENCE_BREAK.split(text) if piece.strip()]


def answering_sentence(text: str, terms: PartTerms) -> str:
    """The sentence that answers: one that does not ask a question itself ("Can someone
    own the review? Leo owns it." answers with the second), then most part coverage, then
    one stating the asked-for kind of answer (a date for "when"), then the earliest.
    Deterministic. When no sentence covers the part or states that kind, the message's
    opening sentences up to `QUOTE_CHARS` (at least one): its first sentence alone ("ok.")
    would claim nothing."""
    candidates = sentences(text) or [text.strip()]
    scored = [
        (
            not asks_a_question(sentence),
            terms.coverage(sentence),
            holds_answer_type(sentence, terms.kinds),
            -index,
            sentence,
        )
        for index, sentence in enumerate(candidates)
    ]
    _, coverage, states_kind, _, sentence = max(scored)
    if coverage or states_kind:
        return sentence
    quoted = candidates[:1]
    for following in candidates[1:]:
        if len(" ".join([*quoted, following])) > QUOTE_CHARS:
            break
        quoted.append(following)
    return " ".join(quoted)


def highlight(text: str, sentence: str) -> str:
    """`text` with the first occurrence of `sentence` in **bold**."""
    start = text.find(sentence)
    if start < 0 or not sentence:
        return text
    end = start + len(sentence)
    return f"{text[:start]}**{sentence}**{text[end:]}"


def _evidence(hit: SearchHitBase, terms: PartTerms, *, is_correction: bool = False) -> Evidence:
    sentence = answering_sentence(hit.text, terms)
    return Evidence(
        document_id=hit.document_id,
        source_message_id=hit.source_message_id,
        channel_id=hit.channel_id,
        channel_name=hit.channel_name,
        conversation_type=hit.conversation_type,
        author_id=hit.author_id,
        author_name=hit.author_name,
        ts_us=hit.ts_us,
        timestamp=hit.timestamp,
        permalink=hit.permalink,
        text=hit.text,
        files=hit.files,
        sentence=sentence,
        highlighted=highlight(hit.text, sentence),
        coverage=round(terms.coverage(hit.text), 4),
        is_correction=is_correction,
    )


def correction_of(
    ranked: Sequence[SearchHitBase], terms: PartTerms, threshold: float
) -> tuple[SearchHitBase, SearchHitBase] | None:
    """(correction, what it corrects) among the part's strongest messages, or None.

    The correction is the latest message nearly as strong as the best whose answering
    sentence says it corrects something (`CORRECTION_CUES`), or, for a part that asks for a
    time, number or place, states another one than an earlier strong message does (an
    update that uses no cue word: "the sync is at 16:00" after "the sync is at 10:00"). It
    corrects the strongest earlier message. Whichever of the two ranked higher, the later
    one wins.

    One of the two must be the search's top hit, the part's answer: a pair of lower hits
    would replace the answer with two messages ranked below it, on another matter as often
    as not (docs/evaluation.md, "A correction corrects the answer").
    """
    floor = max(threshold, CORRECTION_MARGIN * terms.coverage(ranked[0].text))
    strong = [hit for hit in ranked[: 2 + EXTRA_EVIDENCE] if terms.coverage(hit.text) >= floor]
    sentence = {hit.document_id: answering_sentence(hit.text, terms) for hit in strong}
    stated = {key: stated_values(text, terms.kinds) for key, text in sentence.items()}

    def disagrees_with_earlier(hit: SearchHitBase) -> bool:
        mine = stated[hit.document_id]
        return bool(mine) and any(
            other.ts_us < hit.ts_us and stated[other.document_id] not in (frozenset(), mine)
            for other in strong
        )

    cued = [
        hit
        for hit in strong
        if CORRECTION_CUES.search(sentence[hit.document_id]) or disagrees_with_earlier(hit)
    ]
    pairs = (
        (correction, earlier[0])
        for correction in sorted(cued, key=lambda hit: (hit.ts_us, hit.document_id), reverse=True)
        if (earlier := [hit for hit in strong if hit.ts_us < correction.ts_us])
    )
    return next((pair for pair in pairs if ranked[0] in pair), None)


def unanswered_part(part: str, answer: str, threshold: float, strength: float = 0.0) -> AnswerPart:
    """A part the answer does not support, and the line that says why."""
    return AnswerPart(
        part=part,
        supported=False,
        strength=round(strength, 4),
        threshold=threshold,
        answer=answer,
        conflict=None,
        evidence=[],
    )


def part_ranking(
    hits: Sequence[SearchHitBase], terms: PartTerms, threshold: float
) -> list[SearchHitBase]:
    """The question's hits as one part of a multi-part question ranks them.

    The search ranks messages for the whole question, so its top hit may hold none of
    this part's words: "what is ERR-42" would cite the Postgres upgrade message that answers
    the question's other part. Then the first hit that covers the part at the threshold
    leads instead, the rest in the question's order. A top hit that holds any of the
    part's words keeps its place: choosing among covering messages by coverage lost to the
    fused order (docs/evaluation.md, "Which message a part cites").
    """
    ranked = list(hits)
    if not ranked or terms.coverage(ranked[0].text) > 0:
        return ranked
    lead = next((hit for hit in ranked if terms.coverage(hit.text) >= threshold), None)
    return ranked if lead is None else [lead, *(hit for hit in ranked if hit is not lead)]


def answer_part(
    part: str,
    hits: Sequence[SearchHitBase],
    terms: PartTerms,
    threshold: float,
    room: int,
    multi: bool,
    *,
    asks_first: bool = False,
    left: int | None = None,
) -> AnswerPart:
    """One part's evidence, cited answer and support verdict. `asks_first`: the question
    asks how things stood at first, so a correction's earlier message answers it.

    `room` is the part's share of the evidence; the messages it cites may exceed it (a
    correction cites two) within `left`, what the whole answer's `max_evidence` has still
    unused (None: no such bound). With nothing left the part is not answered; with one, a
    correction is cited without the message it replaces."""
    label = f"{part}: " if multi else ""
    if not terms.weights:
        why = "the question has no content words (only stop words) to check evidence against."
        return unanswered_part(part, f"{label}{why}", threshold)
    # Coverage decides *whether* the part is supported; the search's fused order decides
    # which message supports it (for one part of several, `part_ranking`). Choosing among
    # the messages that pass the coverage test instead did not earn its place
    # (docs/evaluation.md, "Which message a part cites").
    ranked = part_ranking(hits, terms, threshold) if multi else list(hits)
    strength = max((terms.coverage(hit.text) for hit in hits), default=0.0)
    if strength < threshold or not ranked:
        why = "the archive does not answer this (no retrieved message covers it)."
        return unanswered_part(part, f"{label}{why}", threshold, strength)
    budget = math.inf if left is None else left
    if budget < 1:
        why = "not answered (the earlier parts used every message max_evidence allows)."
        return unanswered_part(part, f"{label}{why}", threshold, strength)
    correction = correction_of(ranked, terms, threshold)
    conflict = None
    if correction is None:
        lead = _evidence(ranked[0], terms)
        text = f"{label}{lead.sentence} [{lead.document_id}]"
        shown = [lead]
    else:
        later = _evidence(correction[0], terms, is_correction=True)
        earlier = _evidence(correction[1], terms)
        if asks_first:
            lead, other, verb, aside = earlier, later, "changed", "a later message changed this"
            outcome = "the question asks how things stood at first, so the earlier message answers."
        else:
            lead, other, verb = later, earlier, "corrects"
            aside, outcome = "this corrects an earlier message", "the later message wins."
        conflict = (
            f"{later.document_id} ({later.timestamp}) {verb} the earlier "
            f"{earlier.document_id} ({earlier.timestamp}); {outcome}"
        )
        if budget < 2:  # `conflict` still names the other message
            text = f"{label}{lead.sentence} [{lead.document_id}] ({aside}; max_evidence is spent)"
            shown = [lead]
        else:
            text = (
                f"{label}{lead.sentence} [{lead.document_id}] ({aside}: "
                f'"{other.sentence}" [{other.document_id}])'
            )
            shown = [lead, other]
    cited = {item.document_id for item in shown}
    extra = [hit for hit in ranked[1:] if hit.document_id not in cited]
    shown += [_evidence(hit, terms) for hit in extra[: max(0, room - len(shown))]]
    return AnswerPart(
        part=part,
        supported=True,
        strength=round(strength, 4),
        threshold=threshold,
        answer=text,
        conflict=conflict,
        evidence=shown[: int(min(budget, max(room, len(cited))))],
    )


def answer_question(
    engine: SearchEngine,
    question: str,
    *,
    workspace_ids: list[str] | None = None,
    channel_ids: list[str] | None = None,
    author_ids: list[str] | None = None,
    conversation_types: list[str] | None = None,
    start_ts_us: int | None = None,
    end_ts_us: int | None = None,
    max_evidence: int = 12,
    requester: Requester | None = None,
    deadline: Deadline | None = None,
    max_chars: int | None = None,
) -> AnswerResponse:
    """Retrieve, split into parts, pick each part's evidence and answering sentence, and
    answer with `[document_id]` after every claim, or abstain. `deadline` (the MCP tool's
    time budget) is checked between the search's stages; `max_chars` bounds the evidence's
    JSON (`within_chars`)."""
    if not 1 <= max_evidence <= engine.settings.search_max_results:
        raise SlackqueryError(
            f"max_evidence must be between 1 and {engine.settings.search_max_results}"
        )
    most = engine.settings.search_max_query_chars
    if len(question) > most:  # checked by the search too, which names it `query`
        raise SlackqueryError(f"question is {len(question)} characters; the maximum is {most}")
    text = parse_query(question).text
    if not has_searchable_content(text):  # operators alone list messages; they ask nothing
        raise SlackqueryError(
            "question has no searchable text (letters, digits or emoji), only operators or "
            "punctuation"
        )
    started = time.perf_counter()
    request = SearchRequest(
        query=question,
        mode="hybrid",
        workspace_ids=workspace_ids,
        channel_ids=channel_ids,
        author_ids=author_ids,
        conversation_types=conversation_types,
        start_ts_us=start_ts_us,
        end_ts_us=end_ts_us,
        limit=engine.settings.search_max_results,
    )
    response = engine.search(request, deadline=deadline, requester=requester)
    hits = list(response.results)
    aspects = query_aspects(text, engine.settings.search_max_query_parts)
    names = aspects.parts or [aspects.asked]
    threshold = engine.settings.answer_min_coverage
    # Each part's share; `max_evidence` bounds the messages of all parts together, and the
    # earlier parts come first when their citations need more than their share.
    room = max(1, max_evidence // len(names))
    # Read from the whole question: in "…, originally?" the time frame is context, in no
    # part. A question asking both ("the current slot, and the earlier one") lets the
    # later win.
    asks_first = time_frames(text) == {"earliest"}
    with engine.artifact() as artifact:
        visible = artifact.visibility(requester)
        terms = [part_terms(artifact, name, visible) for name in names]
    parts: list[AnswerPart] = []
    left = max_evidence
    for name, part in zip(names, terms, strict=True):
        answered = answer_part(
            name, hits, part, threshold, room, len(names) > 1, asks_first=asks_first, left=left
        )
        left -= len(answered.evidence)
        parts.append(answered)
    # Parts beyond the cap are named as unanswered, so the verdict is at most `partial`.
    cap = f"not answered (a question is answered in at most {len(names)} parts)."
    parts += [unanswered_part(name, f"{name}: {cap}", threshold) for name in aspects.dropped]
    start_of = cache(lambda root_id: thread_start(engine, root_id, requester))
    parts = with_thread_starts(parts, hits, start_of)
    wordless = not any(part.weights for part in terms)
    answer = _assemble(question, parts, response.artifact_id, response, started, wordless=wordless)
    return within_chars(answer, max_chars)


def within_chars(answer: AnswerResponse, max_chars: int | None) -> AnswerResponse:
    """The answer with uncited evidence left out, the last part's last first, while the
    evidence's JSON passes `max_chars`. The cited messages stay whatever their size: an
    answer shows what it cites."""
    if max_chars is None:
        return answer
    cited = {citation.document_id for citation in answer.citations}
    sizes = {
        (p, i): len(item.model_dump_json())
        for p, part in enumerate(answer.parts)
        for i, item in enumerate(part.evidence)
    }
    total = sum(sizes.values())
    dropped: set[tuple[int, int]] = set()
    for p, i in sorted(sizes, reverse=True):
        if total <= max_chars:
            break
        if answer.parts[p].evidence[i].document_id not in cited:
            dropped.add((p, i))
            total -= sizes[p, i]
    if not dropped:
        return answer
    parts = [
        part.model_copy(
            update={
                "evidence": [item for i, item in enumerate(part.evidence) if (p, i) not in dropped]
            }
        )
        for p, part in enumerate(answer.parts)
    ]
    kept = f"{len(sizes) - len(dropped)} of its {len(sizes)} evidence messages, every cited one"
    note = cut_note(kept, max_chars, paged=False)
    return answer.model_copy(update={"parts": parts, "notes": [*answer.notes, note]})


def thread_start(
    engine: SearchEngine, root_id: str, requester: Requester | None
) -> ThreadStart | None:
    """A thread's first message, if it is still there and the requester may see it."""
    first = engine.message_record(root_id, requester)
    if first is None:
        return None
    return ThreadStart(**first.model_dump(include=set(ThreadStart.model_fields)))


def with_thread_starts(
    parts: list[AnswerPart],
    hits: Sequence[SearchHitBase],
    start_of: Callable[[str], ThreadStart | None],
) -> list[AnswerPart]:
    """Each evidence reply with the first message of its thread (`Evidence.in_reply_to`):
    a reply that answers ("45 seconds, check the config.") often names nothing of what it
    answers, so a reader needs the question it replies to beside it."""
    roots = {hit.document_id: hit.replies_to for hit in hits if hit.replies_to is not None}
    return [
        part.model_copy(
            update={
                "evidence": [
                    item.model_copy(update={"in_reply_to": start_of(roots[item.document_id])})
                    if item.document_id in roots
                    else item
                    for item in part.evidence
                ]
            }
        )
        for part in parts
    ]


def _assemble(
    question: str,
    parts: list[AnswerPart],
    artifact_id: str,
    response: SearchResponse,
    started: float,
    *,
    wordless: bool = False,
) -> AnswerResponse:
    """The verdict, the joined answer and the citations it actually makes. `wordless`: the
    question has only stop words, so no evidence could be weighed."""
    unsupported = [part.part for part in parts if not part.supported]
    if len(unsupported) == len(parts) and wordless:
        verdict = "insufficient_evidence"
        answer = (
            "The archive does not answer this question: it has no content words (only stop "
            "words) to check evidence against; ask with the words of what you want to know."
        )
    elif len(unsupported) == len(parts):
        verdict = "insufficient_evidence"
        answer = (
            "The archive does not answer this question: no retrieved message covers enough "
            f"of its content words (best coverage {max(p.strength for p in parts):.2f}, "
            f"needed {parts[0].threshold:.2f})."
        )
    else:
        verdict = "partial" if unsupported else "answered"
        answer = "\n".join(part.answer for part in parts)
    cited: dict[str, Citation] = {}
    for part in parts:
        for item in part.evidence:
            if f"[{item.document_id}]" in part.answer and part.supported:
                cited.setdefault(
                    item.document_id,
                    Citation(
                        document_id=item.document_id,
                        source_message_id=item.source_message_id,
                        permalink=item.permalink,
                    ),
                )
    timings = dict(response.timings_ms)
    timings["answer_total"] = round((time.perf_counter() - started) * 1000, 3)
    return AnswerResponse(
        question=question,
        verdict=verdict,
        answer=answer,
        unsupported_parts=unsupported,
        citations=list(cited.values()),
        parts=parts,
        artifact_id=artifact_id,
        notes=[*response.notes, *_wordless_leads(parts)],
        timings_ms=timings,
    )


def _wordless_leads(parts: list[AnswerPart]) -> list[str]:
    """A note for each supported part whose cited lead holds none of its words: the search
    ranked it first, another hit holds the words (so the part counts as supported), and
    citing that one instead measured worse (docs/evaluation.md); the reader should know."""
    return [
        f"{part.part!r}: the message cited first holds none of the question's words "
        "(coverage 0); read the evidence before relying on it"
        for part in parts
        if part.supported and part.evidence and part.evidence[0].coverage == 0
    ]


# `[id]` not followed by `(` (a Markdown link's text is not a citation).
BRACKETED_CITATION = re.compile(r"\[([^\[\]\s]{3,300})\](?!\()")
# A Markdown link: neither its text nor its target is a bare id (a target may be a permalink).
_MARKDOWN_LINK = re.compile(r"\[[^\[\]]*\]\([^()\s]*\)")
# A URL as a draft writes it: up to white space, a bracket, a quote or `|` (Slack's
# `<url|text>`), without the punctuation that ends the sentence around it.
URL_IN_TEXT = re.compile(r"https?://[^\s<>()\[\]{}\"'`|]+(?<![.,;:!?*_~])", re.IGNORECASE)
# A Slack message path anywhere in a URL makes it a permalink citation, which the whole URL
# must then be, of one of the artifact's workspaces: a look-alike host
# (`sample.slack.com.evil.com`) or a permalink inside another URL's query is an unknown one.
_MESSAGE_PATH = re.compile(r"/archives/[A-Za-z0-9]+/p\d{7,}")
# A bare id: starts with a letter and has a colon inside (`W:C:ts`, `synthetic:eng:0824-01`).
_BARE_ID = re.compile(r"(?<![\w/:.-])[A-Za-z][\w.-]*(?::[\w.-]+)+\w")
# The shape of a message id, `W:C:ts` or `synthetic:eng:0824-01`, or a token holding a
# Slack ts (`C:ts`, a bare `1709565415.044801`): one the artifact does not hold is a
# made-up citation, not prose.
_ID_SHAPE = re.compile(r"[A-Za-z][\w.-]*(?::[\w.-]+){2,}")
_SLACK_TS = re.compile(r"(?<!\d)\d{10}\.\d{6}(?!\d)")


@dataclass(frozen=True)
class Cited:
    """One citation as found in the text, and the document it resolves to (if any)."""

    cited: str
    kind: str
    document_id: str | None


def find_citations(
    artifact: LoadedArtifact,
    engine: SearchEngine,
    text: str,
    visible: Visibility | None,
    deadline: Deadline | None = None,
) -> list[Cited]:
    """Every `[document_id]`, Slack permalink and bare message id in `text`, in order;
    `deadline` is checked before each one is looked up.

    A bracketed or bare token counts when it is a document or source message id of the
    artifact, or has the shape of one (`_ID_SHAPE`, `_SLACK_TS`: a made-up id fails), so prose
    like `[UTC]` or `[sic]` cites nothing; a URL counts when it holds a Slack message path
    (`_MESSAGE_PATH`). A Markdown link's text is no citation.
    A message outside `visible` resolves exactly as one that does not exist (same kind, no
    document id), so what the requester gets back cannot tell the two apart; so does a
    document no reader can open (a thread's context document, `thread:…`).
    """
    deadline = deadline or Deadline(math.inf)
    found: list[tuple[int, str, str]] = []
    for match in BRACKETED_CITATION.finditer(text):
        if not is_url(match.group(1)):  # `[<permalink>]`: the URL pass finds it
            found.append((match.start(), match.group(1), "bracketed"))
    for match in URL_IN_TEXT.finditer(text):
        if _MESSAGE_PATH.search(match.group(0)):
            found.append((match.start(), match.group(0), "permalink"))
    rest = URL_IN_TEXT.sub(" ", BRACKETED_CITATION.sub(" ", _MARKDOWN_LINK.sub(" ", text)))
    bare = [match.group(0) for match in _BARE_ID.finditer(rest)]

    def shown(document_id: str) -> bool:
        deadline.check("checking the next citation")
        return visible_message_row(artifact, document_id, visible) is not None

    values = [value for _, value, _ in found] + bare
    documents = {value for value in values if shown(value)}
    # A document id needs no source lookup (a scan of every row); a hidden or made-up one
    # gets it all the same, so the two still cost alike.
    maybe_sources = [value for value in values if value not in documents]
    sources = {
        source: document
        for source, document in _source_documents(artifact, maybe_sources, visible).items()
        if shown(document)
    }

    def known(value: str, unknown_kind: str) -> list[Cited]:
        """The citation a bracketed or bare token makes: none for a token that is no id."""
        if value in documents:
            return [Cited(value, "document_id", value)]
        if value in sources:
            return [Cited(value, "source_message_id", sources[value])]
        id_shaped = _ID_SHAPE.fullmatch(value) or _SLACK_TS.search(value)
        return [Cited(value, unknown_kind, None)] if id_shaped else []

    citations: list[Cited] = []
    for _, value, how in sorted(found):
        if how == "permalink":
            deadline.check("checking the next citation")
            citations.append(
                Cited(value, "permalink", _permalink_document(engine, artifact, value, visible))
            )
        else:
            citations.extend(known(value, "document_id"))
    for value in bare:
        citations.extend(known(value, "source_message_id"))
    return list(dict.fromkeys(citations))


def _source_documents(
    artifact: LoadedArtifact, values: list[str], visible: Visibility | None
) -> dict[str, str]:
    """Source message id -> document id, for those of `values` that are source ids (none,
    without a lookup, where every source id is its document id).

    For a requester, of messages in the channels they may see, in the query itself: the
    scan then drops a hidden message's row before it reads more of it or groups it, and a
    hidden id costs about what a made-up one does (filtering after left a ~0.3 ms gap).
    """
    if not values or artifact.source_ids_are_document_ids:
        return {}
    query = (
        "select source_message_id, min(document_id) from search_documents "
        "where document_kind = 'message' and source_message_id in (select unnest($ids)) "
    )
    parameters: dict[str, object] = {"ids": sorted(set(values))}
    if visible is not None:
        query += "and workspace_id = $workspace and channel_id in (select unnest($channels)) "
        parameters["workspace"] = visible.workspace_id
        parameters["channels"] = sorted(channel for _, channel in visible.channels)
    cursor = artifact.cursor()
    try:
        rows = cursor.execute(query + "group by 1", parameters).fetchall()
    finally:
        cursor.close()
    return {str(source): str(document) for source, document in rows}


def _permalink_document(
    engine: SearchEngine, artifact: LoadedArtifact, url: str, visible: Visibility | None
) -> str | None:
    try:
        return engine._document_id_from(artifact, url, visible)  # the engine's own parser
    except SlackqueryError:
        return None


def _cited_texts(
    engine: SearchEngine, build_id: str, document_ids: list[str], requester: Requester | None
) -> dict[str, str]:
    """Texts of these messages in the artifact `build_id` (a build id: the caller checks),
    read from its file.

    For a requester, only of messages they could see there (membership as that build
    records it), so one they could not see reads as one that was never there. The ids
    outside those channels are dropped before the lookup, by their `W:C:` prefix (any other
    id shape is dropped too): the query never touches a hidden message's row, and costs
    for a hidden id what it costs for a made-up one.
    """
    path: Path = artifact_file(engine.settings.artifact_path, build_id)
    gone = (
        f"artifact {build_id} is not on disk (removed by retention, or never built); "
        "cannot tell whether cited text changed"
    )
    if not path.exists():
        raise SlackqueryError(gone)
    try:
        with duckdb.connect(str(path), read_only=True) as connection:
            if requester is not None:
                seen = _channels_seen(connection, requester)
                document_ids = [value for value in document_ids if channel_of(value) in seen]
            rows = connection.execute(
                "select document_id, text_display from search_documents "
                "where document_kind = 'message' and document_id in (select unnest($ids))",
                {"ids": document_ids},
            ).fetchall()
    except duckdb.Error as error:
        if not path.exists():  # retention removed it since the check above
            raise SlackqueryError(gone) from None
        # DuckDB names the file; the requester learns the build id, not the server's paths.
        reason = str(error).strip().splitlines()[0].replace(str(path), path.name)
        raise SlackqueryError(f"cannot read artifact {build_id}: {reason}") from None
    return {str(document): text or "" for document, text in rows}


def _channels_seen(
    connection: duckdb.DuckDBPyConnection, requester: Requester
) -> set[tuple[str, str]]:
    """The (workspace, channel) pairs `requester` may see in an artifact, read from its
    channel and membership tables (`may_see`), without loading the artifact."""
    limit = limit_of(connection, requester)
    workspace = {"workspace": requester.workspace_id}
    channels = connection.execute(
        "select channel_id, conversation_type from channels where workspace_id = $workspace",
        workspace,
    ).fetchall()
    member_of = {
        str(channel)
        for (channel,) in connection.execute(
            "select channel_id from channel_members "
            "where workspace_id = $workspace and user_id = $user",
            {**workspace, "user": requester.user_id},
        ).fetchall()
    }
    return {
        (requester.workspace_id, str(channel))
        for channel, kind in channels
        if may_see(requester, str(kind), str(channel) in member_of, limit)
    }


def verifiable_chars(settings: Settings) -> int:
    """The longest draft `verify_citations` checks: fifty questions' worth."""
    return settings.search_max_query_chars * 50


def verify_citations(
    engine: SearchEngine,
    text: str,
    cited_at_artifact: str | None = None,
    *,
    requester: Requester | None = None,
    deadline: Deadline | None = None,
) -> VerificationResponse:
    """Check every citation of a drafted answer against the current artifact.

    `verified` only when every citation exists, is visible to the requester, is active and
    (with `cited_at_artifact`) has the text it had there; an answer without citations is
    `verified` only when it says the evidence is missing. For a requester, a message they
    may not see is reported exactly like one that does not exist, and one they could not
    see in `cited_at_artifact` like one that was not there. `deadline` (the MCP tool's
    time budget) is checked between citations.
    """
    most = verifiable_chars(engine.settings)
    if len(text) > most:
        raise SlackqueryError(f"text is {len(text):,} characters; at most {most:,} are verified")
    deadline = deadline or Deadline(math.inf)
    problems: list[str] = []
    with engine.artifact() as artifact:
        visibility = artifact.visibility(requester)
        found = find_citations(artifact, engine, text, visibility, deadline)
        documents = sorted({item.document_id for item in found if item.document_id})
        current = {
            document: str(artifact.display_row(artifact.row_of[document])["text_display"] or "")
            for document in documents
        }
        artifact_id = artifact.build_id
    before: dict[str, str] | None = None
    if cited_at_artifact is not None and not is_build_id(cited_at_artifact):
        # Whatever the text cites, or if it cites nothing: a draft is checked against it.
        problems.append(
            f"cited_at_artifact {cited_at_artifact[:200]!r} is not a build id "
            "(YYYYmmddTHHMMSSZ-<hex8>-<hex8>, as `artifact_id` in an answer)"
        )
    elif cited_at_artifact is not None and found:
        deadline.check("reading the artifact the citations were taken from")
        cited = [item.document_id or item.cited for item in found]
        try:
            # Cited from the current artifact (the usual case): its texts are already read.
            before = (
                {document: current[document] for document in cited if document in current}
                if cited_at_artifact == artifact_id
                else _cited_texts(engine, cited_at_artifact, cited, requester)
            )
        except SlackqueryError as error:
            problems.append(str(error))
    unread = cited_at_artifact is not None and before is None
    checks = [_check(item, current, before, unread) for item in found]
    if not found and not says_evidence_is_missing(text):
        problems.append(
            "the text cites nothing, and not all of it says the evidence is missing "
            "(a claim without a citation cannot be verified)"
        )
    failed = sum(bool(check.problems) for check in checks)
    if failed:  # an agent reading `problems` alone saw none while the verdict said otherwise
        problems.append(f"{failed} of {len(checks)} citations failed a check (see citations)")
    return VerificationResponse(
        verdict="unverified" if problems else "verified",
        citations=checks,
        problems=problems,
        uncited_sentences=uncited_sentences(text, found),
        artifact_id=artifact_id,
        cited_at_artifact=cited_at_artifact,
    )


def uncited_sentences(text: str, found: Sequence[Cited]) -> list[str]:
    """The first `UNCITED_LISTED` of the text's sentences that cite nothing and do not say
    the evidence is missing, each cut to `QUOTE_CHARS`. A sentence followed by citations
    alone ("… at 17:00. [id]") is cited by them."""
    uncited: list[str] = []
    previous_uncited = False
    for sentence in _SENTENCE_BREAK.split(text):
        rest = _SLACK_LINK.sub(r"\1", sentence)  # `<permalink|label>` cites as the URL
        for item in found:  # ids and permalinks: no word of prose holds one
            rest = rest.replace(f"[{item.cited}]", " ").replace(item.cited, " ")
        if rest != sentence:
            if previous_uncited and not _LETTER_OR_DIGIT.search(rest):
                uncited.pop()
            previous_uncited = False
            continue
        previous_uncited = has_searchable_content(sentence) and not _MISSING_EVIDENCE.search(
            sentence
        )
        if previous_uncited:
            uncited.append(sentence.strip())
    return [
        sentence if len(sentence) <= QUOTE_CHARS else f"{sentence[: QUOTE_CHARS - 1]}…"
        for sentence in uncited[:UNCITED_LISTED]
    ]


def says_evidence_is_missing(text: str) -> bool:
    """Whether every sentence of a text says the archive lacks the evidence: an answer that
    cites nothing is verified only then, not when a claim sits beside such a sentence
    ("The cap is 50,000 rows. I couldn't find more.")."""
    sentences = [sentence for sentence in _SENTENCE_BREAK.split(text) if sentence.strip()]
    return bool(sentences) and all(_MISSING_EVIDENCE.search(part) for part in sentences)


def _check(
    item: Cited,
    current: dict[str, str],
    before: dict[str, str] | None,
    unread: bool = False,
) -> CitationCheck:
    """What holds for one citation, and a problem line for each thing that does not
    (`unread`: the artifact it was cited from could not be read)."""
    document = item.document_id
    exists = document is not None and document in current
    was_there = before is not None and (document or item.cited) in before
    problems: list[str] = []
    if not exists:
        problems.append(
            "deleted or emptied since it was cited"
            if was_there
            else "no such message in the current artifact"
        )
    if unread:
        problems.append("whether its text changed is unknown: its artifact cannot be read")
    unchanged: bool | None = None
    if before is not None and exists:
        unchanged = was_there and before[document or ""] == current[document or ""]
        if not was_there:
            problems.append("not in the artifact it was cited from")
        elif not unchanged:
            problems.append("text changed since it was cited")
    return CitationCheck(
        cited=item.cited,
        kind=item.kind,
        document_id=document,
        exists=exists,
        visible=exists,
        active=exists,
        unchanged=unchanged,
        problems=problems,
    )
