"""Query text handling: FTS-parity tokenising, Slack search syntax, and route classification.

The artifact's FTS index was built with `lower=1, strip_accents=1,
ignore='[^\\p{L}\\p{N}]+'` (see docs/architecture.md). BM25 only finds a query term that
was tokenised exactly like the indexed text, so `fts_tokens` reproduces DuckDB's
`strip_accents` -> `lower` -> split-on-non-letter-or-digit pipeline; a test checks parity
against DuckDB's own tokenizer. Nothing from the query ever becomes SQL text: tokens are
looked up in an in-memory dictionary and filters are resolved to ids.
"""

import calendar
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, timedelta

from slackquery.errors import SlackqueryError

# `[\W_]+` is Python's spelling of `[^\p{L}\p{N}]+`: `\w` is letters, digits and `_`.
_SEPARATORS = re.compile(r"[\W_]+")
# The allowlist that keeps identifiers whole for route classification and highlighting.
_ALLOWLIST_TOKEN = re.compile(r"[\w@./:+#-]+")
_URL = re.compile(r"^https?://", re.IGNORECASE)
_TICKET = re.compile(r"^[A-Za-z]{1,12}-\d+$")
_SLACK_ID = re.compile(r"^[WCUGDT][A-Z0-9]{5,}$")
_COMPOUND = re.compile(r"^\w+[./:_-]\w+")
_HEX = re.compile(r"^[0-9a-fA-F]{8,}$")
_MIXED_ALNUM = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9]{3,}$")
_QUESTION_WORDS = frozenset(
    [
        "why",
        "how",
        "what",
        "when",
        "where",
        "who",
        "which",
        "about",
        "similar",
        "explain",
        "describe",
        "anyone",
        "anybody",
    ]
)
# Common English function words, dropped from the *query* of the BM25 and thread-context
# arms (never from the index, which keeps every token: `stopwords='none'`). In an OR-ed
# BM25 query they only add noise: a short message full of "what / was / the / for" outranks
# the one that mentions the query's content words. This is NLTK's English list (the
# Snowball list plus contraction stems), as FTS tokens: apostrophes split words, so "don't"
# is `don` + `t`. RecallHQ drops common English stop words from its lexical query the same
# way. Measured on Beacon dev in docs/evaluation.md.
STOPWORDS = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because
    been before being below between both but by can couldn d did didn do does doesn
    doing don down during each few for from further had hadn has hasn have haven having
    he her here hers herself him himself his how i if in into is isn it its itself just
    ll m ma me mightn more most mustn my myself needn no nor not now o of off on once
    only or other our ours ourselves out over own re s same shan she should shouldn so
    some such t than that the their theirs them themselves then there these they this
    those through to too under until up ve very was wasn we were weren what when where
    which while who whom why will with won wouldn y you your yours yourself yourselves
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
# `key:value` operators Slack users type; the value runs to the next whitespace.
_OPERATOR_NAMES = "in|from|to|before|after|on|during|is|has"
# A value is a word or a quoted name, `in:"jose, zoe"`, its sigil before the quote or in it.
_OPERATOR = re.compile(rf'(?<!\S)({_OPERATOR_NAMES}):([#@]?"[^"]*"|\S+)', re.IGNORECASE)
_QUOTED_VALUE = re.compile(r'([#@]?)"([^"]*)"')
_PHRASE = re.compile(r'"([^"]+)"')
# An operator, or a quoted phrase, which holds none: `"how to:do it"` is text.
_OPERATOR_OR_PHRASE = re.compile(rf'{_OPERATOR.pattern}|"[^"]*"', re.IGNORECASE)
# Slack's `-word` and `-"a phrase"`: messages holding it are left out. The `-` starts a
# word of its own (`well-known` and `-5°C`'s neighbours are text), and a letter or digit
# (or a quote) follows it.
_EXCLUDED = re.compile(r'(?<!\S)-("[^"]*"|[^\W_][^\s"]*)')
# Slack's `-in:#eng` excludes; searched as text it would rank #eng *up* (the named-scope arm).
_EXCLUDING_OPERATOR = re.compile(rf"(?<!\S)-(?:{_OPERATOR_NAMES}):\S+", re.IGNORECASE)
_MONTHS = {
    name: index
    for index, name in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        start=1,
    )
}


def strip_accents(text: str) -> str:
    """Remove combining marks after canonical decomposition, like DuckDB's `strip_accents`."""
    decomposed = unicodedata.normalize("NFD", text)
    kept = "".join(char for char in decomposed if not unicodedata.combining(char))
    return unicodedata.normalize("NFC", kept)


def normalize(text: str) -> str:
    """The FTS normalisation: accents stripped, then lower-cased."""
    return strip_accents(text).lower()


def fts_tokens(text: str) -> list[str]:
    """Tokens exactly as the artifact's FTS index produced them, in order, duplicates kept."""
    return [token for token in _SEPARATORS.split(normalize(text)) if token]


def content_tokens(text: str, phrases: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The FTS tokens a BM25 query should use: stop words dropped, unless that leaves nothing.

    Tokens inside a quoted phrase are kept whatever they are (the user asked for those exact
    words), and so is every token of a query made only of stop words ("to be or not to be"),
    which would otherwise have nothing to search for. Identifiers (`28P01`, `ERR-42`) are
    never stop words, so they always survive. Order and duplicates are kept.
    """
    tokens = fts_tokens(text)
    quoted = {token for phrase in phrases for token in fts_tokens(phrase)}
    kept = [token for token in tokens if token not in STOPWORDS or token in quoted]
    return kept or tokens


def allowlist_tokens(text: str) -> list[str]:
    """Identifier-preserving tokens (`ERR-42`, `v2.3.1`, URLs, `@name`, `#channel`)."""
    return [token.strip(".:/-") or token for token in _ALLOWLIST_TOKEN.findall(text)]


def is_identifier(token: str) -> bool:
    """Whether a token looks like an id, error code, version, URL or hash, not a word."""
    return bool(
        _URL.match(token)
        or _TICKET.match(token)
        or _SLACK_ID.match(token)
        or _COMPOUND.match(token)
        or _HEX.match(token)
        or _MIXED_ALNUM.match(token)
        or token.startswith(("@", "#"))
    )


def is_unicode_text(text: str) -> bool:
    """Whether `text` holds no lone surrogate (it encodes as UTF-8). Bytes that are not
    UTF-8 in a command-line argument, or a `\\ud83d` escape alone in JSON, arrive as one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def has_searchable_content(text: str) -> bool:
    """True when the text holds a letter, digit or symbol (emoji), not only spaces/punctuation."""
    return any(unicodedata.category(char)[0] in "LNS" for char in text)


@dataclass
class ParsedQuery:
    """A query with Slack search operators taken out and turned into structured filters."""

    text: str
    phrases: list[str] = field(default_factory=list)
    channel_names: list[str] = field(default_factory=list)
    user_names: list[str] = field(default_factory=list)
    start_ts_us: int | None = None
    end_ts_us: int | None = None
    is_thread: bool = False
    has_link: bool = False
    excluded: list[str] = field(default_factory=list)  # `-word`, `-"a phrase"`


_EPOCH = date(1970, 1, 1)
_DAY_US = 86_400_000_000


def _day_start_us(day: date) -> int:
    # Exact integer microseconds: a float timestamp loses microseconds in far years, and
    # `day + 1` would overflow at 9999-12-31, so the day after is this plus `_DAY_US`.
    return (day - _EPOCH).days * _DAY_US


def _parse_day(value: str, operator: str) -> date:
    lowered = value.lower()
    today = datetime.now(UTC).date()
    if lowered == "today":
        return today
    if lowered == "yesterday":
        return _relative_span(lowered, today)[0]
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise SlackqueryError(
            f"{operator}:{value} is not a date; use YYYY-MM-DD, `today` or `yesterday` (UTC)"
        ) from None


def _parse_period(value: str) -> tuple[int, int]:
    """`during:` takes YYYY-MM, YYYY or a month name (its latest past occurrence); the
    period's first microsecond and the first microsecond after it."""
    lowered = value.lower()
    year_match = re.fullmatch(r"([0-9]{4})", value)
    month_match = re.fullmatch(r"([0-9]{4})-([0-9]{2})", value)
    if year_match:
        year, first_month, last_month = int(year_match.group(1)), 1, 12
    elif month_match and 1 <= int(month_match.group(2)) <= 12:
        year, first_month = int(month_match.group(1)), int(month_match.group(2))
        last_month = first_month
    elif lowered in _MONTHS:
        today = datetime.now(UTC).date()
        first_month = last_month = _MONTHS[lowered]
        year = today.year if first_month <= today.month else today.year - 1
    else:
        raise SlackqueryError(f"during:{value} is not a month; use YYYY-MM, YYYY or a month name")
    if not MINYEAR <= year <= MAXYEAR:
        raise SlackqueryError(f"during:{value} is out of range; years run {MINYEAR}-{MAXYEAR}")
    last_day = date(year, last_month, calendar.monthrange(year, last_month)[1])
    return _day_start_us(date(year, first_month, 1)), _day_start_us(last_day) + _DAY_US


def _narrow(current: int | None, new: int, pick: type[max] | type[min]) -> int:
    return new if current is None else pick(current, new)


def parse_query(raw: str) -> ParsedQuery:
    """Split Slack search syntax (`in:#c from:@u before:/after:/on:/during: is:thread
    has:link "phrase" -word -"phrase"`) out of the query text.

    Dates are UTC days; `before:` and `after:` exclude the named day, as in Slack. An
    unknown operator value, or an excluding operator (`-in:`), is an error rather than
    silently searched as text.
    """
    excluding = _EXCLUDING_OPERATOR.search(raw)
    if excluding:
        raise SlackqueryError(
            f"{excluding.group(0)[:60]}: excluding with '-' is not supported; operators only "
            "narrow a search (in:, from:, before:, after:, on:, during:, is:thread, has:link)"
        )
    parsed = ParsedQuery(text="")

    def take(match: re.Match[str]) -> str:
        if match.group(1) is None:  # a quoted phrase: left as it is
            return match.group(0)
        operator = match.group(1).lower()
        quoted = _QUOTED_VALUE.fullmatch(match.group(2))
        value = "".join(quoted.groups()) if quoted else match.group(2).strip('"')
        if operator == "in":
            parsed.channel_names.append(value)
        elif operator == "from":
            parsed.user_names.append(value)
        elif operator == "to":  # Slack's "sent to": no filter here says that
            raise SlackqueryError(
                f"to:{value} is not supported; narrow with in: (a DM or group DM by the name "
                "list_slack_scopes gives it) or from:"
            )
        elif operator == "is":
            if value.lower() != "thread":
                raise SlackqueryError(f"is:{value} is not supported; only is:thread is")
            parsed.is_thread = True
        elif operator == "has":
            if value.lower() != "link":
                raise SlackqueryError(f"has:{value} is not supported; only has:link is")
            parsed.has_link = True
        elif operator == "during":
            start, following = _parse_period(value)
            parsed.start_ts_us = _narrow(parsed.start_ts_us, start, max)
            parsed.end_ts_us = _narrow(parsed.end_ts_us, following - 1, min)
        else:
            start = _day_start_us(_parse_day(value, operator))
            if operator == "on":
                parsed.start_ts_us = _narrow(parsed.start_ts_us, start, max)
                parsed.end_ts_us = _narrow(parsed.end_ts_us, start + _DAY_US - 1, min)
            elif operator == "before":
                parsed.end_ts_us = _narrow(parsed.end_ts_us, start - 1, min)
            else:
                parsed.start_ts_us = _narrow(parsed.start_ts_us, start + _DAY_US, max)
        return " "

    def exclude(match: re.Match[str]) -> str:
        excluded = match.group(1).strip('"').strip()
        if excluded:
            parsed.excluded.append(excluded)
        return " "

    remaining = _EXCLUDED.sub(exclude, _OPERATOR_OR_PHRASE.sub(take, raw))
    parsed.phrases = [phrase.strip() for phrase in _PHRASE.findall(remaining) if phrase.strip()]
    parsed.text = " ".join(remaining.replace('"', " ").split())
    return parsed


Route = str  # "exact" | "conceptual" | "mixed", or NEWEST
# The route of a query of operators only: no ranking, the messages its filters keep listed
# newest first (as Slack lists `in:#eng after:2024-03-01`).
NEWEST = "newest"


def classify_route(text: str, phrases: list[str]) -> Route:
    """Pick the fusion weights' route. Identifiers and quoted phrases push towards exact;
    long natural-language questions towards conceptual; anything else is mixed."""
    tokens = allowlist_tokens(text)
    if phrases:
        return "exact"
    if not tokens:
        return "mixed"
    identifiers = sum(1 for token in tokens if is_identifier(token))
    if 2 * identifiers >= len(tokens):
        return "exact"
    words = {token.lower() for token in tokens}
    if len(tokens) >= 5 or words & _QUESTION_WORDS or text.rstrip().endswith("?"):
        return "mixed" if identifiers else "conceptual"
    return "mixed"


# A `:` that ends a lead-in, not one inside a clock time (`02:00`) or a URL (`https://`).
_LEAD_IN_COLON = r"(?:(?<!\d):(?!//)|:(?![\d/]))"
_QUESTION_OPENERS = r"(?:what|how|why|when|where|who|which|did|does|do|is|are|was|were)\b"
# Where a multi-part question splits into its parts: sentence ends, `;`, a `:` after a
# lead-in, list commas (a following `and`/`or` belongs to the separator), and an `and`
# that starts a new question ("... and what happened to Z") unless all before it is one
# question word ("When and where is the offsite?" asks both of one thing).
_ASPECT_SEPARATORS = re.compile(
    rf"(?:[?!;]|{_LEAD_IN_COLON})+\s*"
    r"|,\s*(?:(?:and|or)\s+)?"
    + "|"
    + "".join(rf"(?<!^{word})" for word in ("what", "how", "why", "when", "where", "who", "which"))
    + rf"\s+and\s+(?={_QUESTION_OPENERS})",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Aspects:
    """The parts of a multi-part question that are ranked on their own, the parts beyond
    the cap (left out), and what the question asks without its context
    (a lead-in before `:`, a time frame set apart by commas): the one part of a question
    that asks one thing."""

    parts: list[str]
    dropped: tuple[str, ...] = ()
    asked: str = ""

    def note(self) -> str | None:
        """The response note that says parts were left out, if any were."""
        if not self.dropped:
            return None
        return (
            f"only the first {len(self.parts)} question parts were searched on their own "
            f"({len(self.dropped)} dropped)"
        )


def query_aspects(text: str, max_parts: int) -> Aspects:
    """The parts of a multi-part question (at most `max_parts`), or none when it asks one thing.

    "Catch me up on May 3: what changed about X, how was Y checked, and what happened to
    Z?" asks three things; one embedding of the whole averages them, so a message that
    answers one part ranks below messages loosely related to all. A part needs a word that
    is not a stop word ("..., and why?" adds none); a lead-in before `:` is context, not a
    part, and so is a time frame set apart by commas ("Nowadays, how big …?", "…,
    originally?"): it says which value is asked for, not what about. Each part costs an
    embedding and a ranking pass, hence the cap: a 2,000-character list of 150
    comma-separated parts would otherwise cost seconds.
    """
    lead_in = re.search(_LEAD_IN_COLON, text)
    rest = text[lead_in.end() :] if lead_in else ""
    body = (rest if rest.strip() else text).strip()
    parts = [part.strip() for part in _ASPECT_SEPARATORS.split(body)]
    parts = [part for part in parts if _has_content(_without_frames(part))]
    if len(parts) < 2:
        return Aspects([], asked=parts[0] if parts else text)
    return Aspects(parts[:max_parts], tuple(parts[max_parts:]), asked=text)


def _has_content(text: str) -> bool:
    return any(token not in STOPWORDS for token in fts_tokens(text))


def _without_frames(text: str) -> str:
    for words in _TIME_FRAMES.values():
        text = words.sub(" ", text)
    return text


# Expected answer types, as in classic factoid question answering: a question that asks
# "when" (or "at what hour", "on which day") is answered by a message that states a date
# or time, "how many / much / long / often / big / …" by one with a number, "where" by one
# with a link, path or channel. Only the interrogative counts: the word must open the
# question or one of its clauses ("..., and when was it due?"), so "find the message where
# Meera approved it" asks for no place.
_CLAUSE_START = r"(?:^|[,;:?]\s*|\b(?:and|or)\s+)"
_ANSWER_TYPE_QUESTIONS = {
    "time": re.compile(
        _CLAUSE_START
        + r"(?:(?:at|on|in|by) )?"
        + r"(?:when\b|(?:what|which) (?:time|day|date|hour|week|month|year)\b)",
        re.IGNORECASE,
    ),
    "number": re.compile(
        r"\bhow (?:many|much|long|often|frequently|big|large|small|fast|far|old|high|low)\b"
        r"|\bwhat (?:size|percentage|share|number)\b",
        re.IGNORECASE,
    ),
    "place": re.compile(
        _CLAUSE_START
        + r"(?:(?:in|on|to|at|from|for) )?"
        + r"(?:where\b|(?:what|which) (?:slack )?(?:channel|room|url|link)s?\b(?!['’]s))",
        re.IGNORECASE,
    ),
}
_MONTH_NAMES = "|".join(
    sorted({*_MONTHS, *(name[:3] for name in _MONTHS), "sept"}, key=len, reverse=True)
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_ANSWER_TYPE_CUES = {
    "time": re.compile(
        r"\b\d{4}-\d{2}-\d{2}\b"  # 2026-09-03
        r"|\b\d{1,2}:\d{2}\b"  # 16:00
        r"|\b\d{1,2}\s?(?:am|pm)\b"  # 4pm
        rf"|\b(?:{_MONTH_NAMES})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b"  # Sep 23
        rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH_NAMES})\b"  # 23 Sep
        rf"|\b(?:{_WEEKDAYS})s?\b",
        re.IGNORECASE,
    ),
    "number": re.compile(
        r"\b\d+(?:[.,]\d+)?\b"
        r"|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen|hundred"
        r"|thousand|million)\b",
        re.IGNORECASE,
    ),
    "place": re.compile(r"https?://\S+|(?:^|\s)/[\w.-]+|(?:^|\s)#[\w-]+", re.IGNORECASE),
}


# "who" / "which person" is answered by a message that names someone (the answer-cue stage,
# serving/stages.py: names are the workspace's, so the artifact tells them).
_ASKS_PERSON = re.compile(
    _CLAUSE_START + r"(?:who(?:m|se|'s|’s)?\b|which (?:person|people)\b)", re.IGNORECASE
)


def asks_person(text: str) -> bool:
    """True when the question asks who ("who owns it?", "…, and which person looks after it?")."""
    return _ASKS_PERSON.search(text) is not None


def asks_a_question(text: str) -> bool:
    """True when the text ends by asking: its last sentence ends with a question mark."""
    return text.rstrip().endswith(("?", "？"))


def answer_types(text: str) -> tuple[str, ...]:
    """The kinds of answer the question asks for (`time`, `number`, `place`), in that order."""
    return tuple(kind for kind, pattern in _ANSWER_TYPE_QUESTIONS.items() if pattern.search(text))


def stated_values(text: str, kinds: tuple[str, ...]) -> frozenset[str]:
    """The answers of these kinds that the text states ("16:00", "sep 23"), case-folded."""
    return frozenset(
        match.group(0).strip().casefold()
        for kind in kinds
        for match in _ANSWER_TYPE_CUES[kind].finditer(text)
    )


def holds_answer_type(text: str, kinds: tuple[str, ...]) -> bool:
    """True when the message text states an answer of one of these kinds."""
    return any(_ANSWER_TYPE_CUES[kind].search(text) for kind in kinds)


# Words that ask how things stand now (`latest`: the latest-first arm, serving/arms.py) or
# how they stood at first (`earliest`: which message of a correction answers, serving/
# answers.py). "first" alone is left out ("the first release" names a thing), and so is the
# passive "was used to" ("the stack used to build it").
_TIME_FRAMES = {
    "latest": re.compile(
        r"\b(?:now|nowadays|currently|current|presently|at present|these days|today|latest"
        r"|most recent|still|any ?more|at the moment|as (?:things|it) stands?)\b",
        re.IGNORECASE,
    ),
    "earliest": re.compile(
        r"\b(?:originally|original|initially|at first|at the start|in the beginning|earlier"
        r"|previously|formerly|(?<!was )(?<!were )(?<!is )(?<!are )(?<!be )(?<!been )used to)\b",
        re.IGNORECASE,
    ),
}


def time_frames(text: str) -> frozenset[str]:
    """Which of `latest` ("currently", "still") and `earliest` ("originally") the question
    asks about."""
    return frozenset(name for name, words in _TIME_FRAMES.items() if words.search(text))


# Calendar days a question names in words, for the scope arm (serving/arms.py): "on Sep
# 28", "Sep 14–18", "Sep 28–Oct 2", "April 4, 2024", "4 April", "2026-09-28", and whole
# months after a preposition ("in September", "during March 2024"; "the March release"
# names a release, not a time to search).
_ORDINAL = r"(?:st|nd|rd|th)?"
_RANGE = r"\s*(?:-|–|—|to|through|until|till)\s*"
_NAMED_DAYS = re.compile(
    rf"\b(?P<month>{_MONTH_NAMES})\.?\s+(?P<day>\d{{1,2}}){_ORDINAL}\b"
    rf"(?:,?\s+(?P<year>\d{{4}})\b)?"
    rf"(?:{_RANGE}(?:(?P<month2>{_MONTH_NAMES})\.?\s+)?(?P<day2>\d{{1,2}}){_ORDINAL}\b"
    rf"(?:,?\s+(?P<year2>\d{{4}})\b)?)?"
    rf"|\b(?P<dday>\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?(?P<dmonth>{_MONTH_NAMES})\b"
    rf"(?:,?\s+(?P<dyear>\d{{4}})\b)?"
    r"|\b(?P<iso>\d{4}-\d{2}-\d{2})\b"
    rf"|\b(?:in|during|throughout)\s+(?:the\s+month\s+of\s+)?(?P<mmonth>{_MONTH_NAMES})\b\.?"
    r"(?:,?\s+(?P<myear>\d{4})\b)?(?![.,]?\s*\d)",
    re.IGNORECASE,
)
# A day named in words is a day somewhere: its window runs from its start in the
# easternmost time zone (UTC+14) to its end in the westernmost (UTC-12).
_EAST_US = 14 * 3_600_000_000
_WEST_US = 12 * 3_600_000_000
# (year or None when the question does not say, month, day or None for the whole month)
NamedDay = tuple[int | None, int, int | None]


def named_days(text: str, today: date | None = None) -> list[tuple[NamedDay, NamedDay]]:
    """The days or ranges of days the text names, each as (first, last); days named
    relative to `today` (default: the current UTC day) as `relative_days` reads them."""
    found = relative_days(text, today or datetime.now(UTC).date())
    for match in _NAMED_DAYS.finditer(text):
        groups = match.groupdict()
        if (groups["month"] or groups["dmonth"] or groups["mmonth"]) == "may":
            continue  # the verb ("may 4 people join?"); the month is written "May"
        if groups["mmonth"]:
            month = (_year(groups["myear"]), _month(groups["mmonth"]), None)
            found.append((month, month))
            continue
        if groups["iso"]:
            year, month, day = (int(part) for part in groups["iso"].split("-"))
            found.append(((year, month, day), (year, month, day)))
            continue
        if groups["dday"]:
            day_first = (_year(groups["dyear"]), _month(groups["dmonth"]), int(groups["dday"]))
            found.append((day_first, day_first))
            continue
        first = (_year(groups["year"]), _month(groups["month"]), int(groups["day"]))
        last = first
        if groups["day2"]:
            month2 = _month(groups["month2"]) if groups["month2"] else first[1]
            last = (_year(groups["year2"]) or first[0], month2, int(groups["day2"]))
        found.append((first, last))
    return found


# Days named relative to today. "today" itself is left out: "who owns the deploy today?"
# asks how things stand now (`time_frames`), not what was posted today.
_RELATIVE_DAYS = re.compile(r"\b(?:yesterday|(?:this|last)\s+(?:week|month))\b", re.IGNORECASE)


def relative_days(text: str, today: date) -> list[tuple[NamedDay, NamedDay]]:
    """The days named relative to `today`, as (first, last): "yesterday", "this week" /
    "last week" (Monday to Sunday, this week up to today), "this month" / "last month"."""
    found = []
    for match in _RELATIVE_DAYS.finditer(text):
        try:
            first, last = _relative_span(" ".join(match.group(0).lower().split()), today)
        except OverflowError:  # before the calendar's first day
            continue
        found.append(((first.year, first.month, first.day), (last.year, last.month, last.day)))
    return found


def _relative_span(which: str, today: date) -> tuple[date, date]:
    one_day = timedelta(days=1)
    monday = today - timedelta(days=today.weekday())
    month_start = today.replace(day=1)
    if which == "yesterday":
        return today - one_day, today - one_day
    if which == "this week":
        return monday, today
    if which == "last week":
        return monday - timedelta(days=7), monday - one_day
    if which == "this month":
        return month_start, today
    return (month_start - one_day).replace(day=1), month_start - one_day


def _year(text: str | None) -> int | None:
    return int(text) if text else None


def _month(name: str) -> int:
    return _MONTHS[next(full for full in _MONTHS if full.startswith(name.lower()[:3]))]


def day_spans(
    named: list[tuple[NamedDay, NamedDay]], span_us: tuple[int, int]
) -> list[tuple[date, date]]:
    """The named days as (first, last) calendar days within the archive's span.

    A day without a year is read in the latest year of the span that holds it; a range's
    end in an earlier month than its start is in the next year ("Dec 30–Jan 2").
    Days that do not exist or lie outside the span are left out.
    """
    first_day, last_day = _day_of(span_us[0], -1), _day_of(span_us[1], 1)
    spans = []
    for first, last in named:
        start = _resolve_day(first, first_day, last_day)
        if start is None:
            continue
        end = _calendar_day(last[0] or start.year, last[1], last[2])
        if end is not None and last[0] is None and last[1] < start.month:
            end = _calendar_day(start.year + 1, last[1], last[2])
        if end is not None and end >= start:
            spans.append((start, end))
    return spans


def _day_of(ts_us: int, shift: int) -> date:
    """The UTC day of `ts_us`, shifted by `shift` days, within the calendar's range."""
    try:
        return datetime.fromtimestamp(ts_us / 1e6, UTC).date() + timedelta(days=shift)
    except (OverflowError, ValueError, OSError):
        return date.max if ts_us > 0 else date.min


def day_window_us(first: date, last: date) -> tuple[int, int]:
    """Inclusive `(start_us, end_us)` of these days in every time zone."""
    return _day_start_us(first) - _EAST_US, _day_start_us(last) + _DAY_US + _WEST_US - 1


def _resolve_day(named: NamedDay, first_day: date, last_day: date) -> date | None:
    """The named day (a whole month: its first day) in the year named, or else in the
    latest year of the span where it (a month: any of its days) lies within the span."""
    year, month, day = named
    years = [year] if year is not None else range(last_day.year, first_day.year - 1, -1)
    for candidate in years:
        start = _calendar_day(candidate, month, 1 if day is None else day)
        end = _calendar_day(candidate, month, day)
        if start is not None and end is not None and start <= last_day and first_day <= end:
            return start
    return None


def _calendar_day(year: int, month: int, day: int | None) -> date | None:
    """The date, or None where the calendar has none; a day of None is the month's last."""
    try:
        return date(year, month, calendar.monthrange(year, month)[1] if day is None else day)
    except ValueError:
        return None
