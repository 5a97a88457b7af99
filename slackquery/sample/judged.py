"""A large judged question set over the sample workspace, with evidence known by construction.

The sample's fifteen judged queries (`planted`) were written next to the messages they
ask about, so their wording leans on the messages' own words. This module plants many
more facts and asks about them in *other* words, so a ranking that wins here wins on
meaning, not on shared vocabulary:

- Each fact is one attribute (retention, nightly schedule, maintainer, ...) of one of
  the workspace's internal services (shorebird names that nothing else in the sample
  uses). Every service has several attributes, so its name alone never identifies the
  answer: the other attributes of the same service are the distractors.
- Messages are written from `Attribute.say` / `update` / `ask` / `reply` / `foreign`;
  questions only from `Attribute.question` / `earlier` / `clause` and the fixed frames
  below. The two template families share no content word (`tests/sample/test_judged.py`
  checks it), so a question shares only the service name (or, for identifier questions,
  the ticket key) with its evidence.
- Kinds: `paraphrase` (one or two statements), `crosslingual` (the statement is in
  German, French, Spanish or Portuguese, the question in English), `temporal` (a first
  value and a later change, asked once as "currently" and once as "originally"),
  `identifier` (the question names the ticket key instead of the service),
  `thread-reply` (a thread asks, a reply that never names the service answers), and
  `multipart` (two attributes of one service in one question). Unanswerable questions ask
  about an attribute never planted for a service, or about services that do not exist.

Everything is drawn from `random.Random(seed)`: the same seed gives the same facts,
messages, ids and questions.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from slackquery.sample.planted import MESSAGES as SAMPLE_MESSAGES
from slackquery.sample.planted import PlantedMessage
from slackquery.sample.workspace import CONVERSATION_BY_NAME, DEPLOYBOT, EPOCH_START, USER_BY_NAME


@dataclass(frozen=True)
class Attribute:
    """One kind of fact about a service and every template that states or asks it.

    `say`, `update`, `ask`, `reply` and `foreign` write messages (`{E}` service, `{v}`
    value); `question`, `earlier` and `clause` write questions and never use a content
    word of the message templates. `foreign` is `(language, template)` or None.
    """

    name: str
    values: tuple[str, ...]
    say: tuple[str, str]
    update: str
    ask: str
    reply: str
    foreign: tuple[str, str] | None
    question: str
    earlier: str
    clause: str


ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "retention",
        ("30", "45", "90", "120", "365"),
        (
            "{E} purges stored records after {v} days.",
            "Records older than {v} days get wiped from {E} automatically.",
        ),
        "Heads-up: {E} wipes records after {v} days starting with this sprint.",
        "Quick one: how soon does {E} purge stored records?",
        "{v} days, I set that myself.",
        ("de", "{E} löscht gespeicherte Datensätze nach {v} Tagen."),
        "How long does {E} keep data before deleting it?",
        "How long did {E} keep data before deleting it, originally?",
        "how long {E} keeps data before deleting it",
    ),
    Attribute(
        "schedule",
        ("01:30", "02:15", "03:45", "04:10", "05:20"),
        (
            "The {E} batch kicks off every night at {v} UTC.",
            "Nightly {E} run starts at {v} UTC sharp.",
        ),
        "Moved the {E} nightly batch to {v} UTC, it clashed with backups.",
        "What time does the {E} nightly batch kick off?",
        "{v} UTC, been that way for ages.",
        ("fr", "Le traitement nocturne de {E} démarre chaque nuit à {v} UTC."),
        "At what hour is the overnight {E} processing scheduled?",
        "At what hour was the overnight {E} processing scheduled, originally?",
        "at what hour the overnight {E} processing is scheduled",
    ),
    Attribute(
        "maintainer",
        ("Priya", "José", "Aiko", "Łukasz", "Tomás", "Nnamdi", "Samir", "Hannah"),
        (
            "{v} is now the maintainer of {E}; send reviews their way.",
            "Maintainer for {E}: {v}. Ping them for reviews.",
        ),
        "Handover done: {v} maintains {E} from today.",
        "Anybody know who maintains {E}?",
        "{v} does, since the reorg.",
        ("es", "{v} es ahora la persona responsable de mantener {E}."),
        "Which person looks after {E}?",
        "Which person looked after {E}, originally?",
        "which person looks after {E}",
    ),
    Attribute(
        "region",
        ("eu-north-1", "eu-central-1", "us-east-2", "ap-northeast-1", "eu-west-3"),
        (
            "{E} is deployed to {v} now.",
            "{E} runs in the {v} cluster.",
        ),
        "{E} got migrated to {v}; nothing left in the old cluster.",
        "Which cluster is {E} deployed to?",
        "{v}, same as the rest of the fleet.",
        ("de", "{E} läuft jetzt im Rechenzentrum {v}."),
        "In what geographic location is {E} hosted?",
        "In what geographic location was {E} hosted, originally?",
        "in what geographic location {E} is hosted",
    ),
    Attribute(
        "datastore",
        ("PostgreSQL", "MySQL", "CockroachDB", "SQLite", "MariaDB"),
        (
            "{E} stores its state in {v}.",
            "Backing store for {E} is {v}.",
        ),
        "{E} switched its backing store to {v}, the previous one is decommissioned.",
        "What does {E} store its state in?",
        "{v}. Migration finished last month.",
        ("pt", "O {E} guarda o seu estado em {v}."),
        "Which database engine holds the information of {E}?",
        "Which database engine held the information of {E}, originally?",
        "which database engine holds the information of {E}",
    ),
    Attribute(
        "timeout",
        ("5", "10", "15", "30", "45"),
        (
            "{E} gives up on upstream calls after {v} seconds.",
            "Upstream call timeout in {E}: {v} sec.",
        ),
        "Bumped the {E} upstream timeout to {v} seconds.",
        "What's the upstream timeout in {E}?",
        "{v} seconds, check the config.",
        ("fr", "{E} abandonne les appels en amont après {v} secondes."),
        "How patient is {E} with a dependency that hangs?",
        "How patient was {E} with a dependency that hangs, originally?",
        "how patient {E} is with a dependency that hangs",
    ),
    Attribute(
        "alerts",
        ("#ops-alerts", "#oncall-pages", "#sre-noise", "#infra-warnings", "#pager-feed"),
        (
            "Alerts from {E} post to {v}.",
            "{E} warnings land in {v}.",
        ),
        "Rerouted {E} alerts to {v}; muted the old destination.",
        "Where do {E} alerts post?",
        "{v}. Muted it elsewhere.",
        ("es", "Las alertas de {E} se publican en {v}."),
        "Which Slack room is notified when {E} misbehaves?",
        "Which Slack room was notified when {E} misbehaved, originally?",
        "which Slack room is notified when {E} misbehaves",
    ),
    Attribute(
        "replicas",
        ("2", "3", "4", "6", "8"),
        (
            "We run {v} replicas of {E} in production.",
            "{E} is scaled to {v} replicas.",
        ),
        "Scaled {E} to {v} replicas this morning.",
        "What replica count is {E} running at?",
        "{v}, autoscaler pinned.",
        ("de", "{E} läuft in Produktion mit {v} Instanzen."),
        "How many copies of {E} serve live traffic?",
        "How many copies of {E} served live traffic, originally?",
        "how many copies of {E} serve live traffic",
    ),
    Attribute(
        "language",
        ("Go", "Rust", "Kotlin", "Elixir", "TypeScript"),
        (
            "{E} is written in {v}.",
            "The {E} codebase is {v} end to end.",
        ),
        "{E} has been rewritten in {v}; the old code is archived.",
        "What language is {E} written in?",
        "{v}, the whole thing.",
        ("pt", "O {E} foi escrito em {v}."),
        "Which programming stack was used to build {E}?",
        "Which programming stack was used to build {E}, originally?",
        "which programming stack was used to build {E}",
    ),
    Attribute(
        "maintenance",
        ("Tuesday", "Wednesday", "Thursday", "Saturday", "Sunday"),
        (
            "Maintenance window for {E} is every {v} evening.",
            "{E} gets patched on {v} evenings.",
        ),
        "{E} maintenance moves to {v} evenings.",
        "When is the {E} maintenance window?",
        "{v} evenings.",
        None,
        "On which day of the week can {E} be taken down for upkeep?",
        "On which day of the week could {E} be taken down for upkeep, originally?",
        "on which day of the week {E} can be taken down for upkeep",
    ),
    Attribute(
        "throttle",
        ("100", "250", "500", "1000", "2000"),
        (
            "{E} throttles clients at {v} requests per minute.",
            "Throttle on {E}: {v} req/min per client.",
        ),
        "Raised the {E} throttle to {v} requests per minute.",
        "What's the throttle on {E} right now?",
        "{v} per minute.",
        ("es", "{E} limita a los clientes a {v} peticiones por minuto."),
        "What usage quota does {E} enforce on each caller?",
        "What usage quota did {E} enforce on each caller, originally?",
        "what usage quota {E} enforces on each caller",
    ),
    Attribute(
        "cache",
        ("5", "10", "15", "30", "60"),
        (
            "{E} caches lookups for {v} minutes.",
            "Lookup cache TTL in {E} is {v} min.",
        ),
        "Dropped the {E} lookup cache TTL to {v} minutes.",
        "What's the lookup cache TTL on {E}?",
        "{v} minutes iirc.",
        ("de", "{E} speichert Abfragen {v} Minuten lang zwischen."),
        "For what span are answers memoized by {E}?",
        "For what span were answers memoized by {E}, originally?",
        "for what span answers are memoized by {E}",
    ),
    Attribute(
        "delivery",
        ("Argo CD", "Spinnaker", "Flux", "Jenkins", "Buildkite"),
        (
            "{E} ships through {v} pipelines.",
            "Releases of {E} are shipped with {v}.",
        ),
        "{E} releases moved onto {v}; the previous pipelines are switched off.",
        "What does {E} ship through?",
        "{v}, same as everything else.",
        ("pt", "As versões do {E} são publicadas pelo {v}."),
        "Which continuous delivery system rolls out {E}?",
        "Which continuous delivery system rolled out {E}, originally?",
        "which continuous delivery system rolls out {E}",
    ),
    Attribute(
        "payload",
        ("1", "2", "5", "10", "25"),
        (
            "{E} rejects payloads above {v} MB.",
            "Payload cap for {E}: {v} MB.",
        ),
        "Lifted the {E} payload cap to {v} MB.",
        "What's the payload cap on {E}?",
        "{v} MB, hard limit.",
        ("fr", "{E} refuse les charges utiles de plus de {v} Mo."),
        "How big can a body sent to {E} be?",
        "How big could a body sent to {E} be, originally?",
        "how big a body sent to {E} can be",
    ),
    Attribute(
        "spend",
        ("400", "900", "1500", "2600", "4200"),
        (
            "{E} costs us about €{v} a month in cloud spend.",
            "Monthly cloud bill for {E} is around €{v}.",
        ),
        "{E} cloud spend dropped to €{v} a month after the cleanup.",
        "How much is {E} costing us in cloud spend?",
        "€{v} monthly, roughly.",
        ("es", "{E} nos cuesta unos {v} euros al mes en la nube."),
        "What is the hosting expense of {E}?",
        "What was the hosting expense of {E}, originally?",
        "what the hosting expense of {E} is",
    ),
    Attribute(
        "snapshots",
        ("1", "2", "4", "6", "12"),
        (
            "{E} snapshots its state every {v} hours.",
            "Snapshot interval for {E}: {v} hrs.",
        ),
        "{E} snapshots every {v} hours from now on.",
        "How often does {E} take snapshots?",
        "Every {v} hours.",
        ("de", "{E} erstellt alle {v} Stunden eine Sicherung."),
        "How frequently are recovery copies of {E} made?",
        "How frequently were recovery copies of {E} made, originally?",
        "how frequently recovery copies of {E} are made",
    ),
)
ATTRIBUTE_BY_NAME = {attribute.name: attribute for attribute in ATTRIBUTES}

# Question frames (question vocabulary too): "currently" questions and multi-part ones.
CURRENT_FRAMES = ("At present, {q}", "Nowadays, {q}", "As things stand, {q}")
MULTIPART_FRAMES = (
    "Can you tell me {a}, and also {b}?",
    "I would like to learn {a} and {b}.",
    "Remind me {a}, as well as {b}?",
)
IDENTIFIER_SUBJECT = "the system tracked in {id}"
# Filler replies in thread-reply facts: a thread usually has more than the answer.
SIDE_REPLIES = ("not sure, let me check", "following", "good question", "same question here")

# Internal services the facts are about. Nothing else in the sample uses these names.
SERVICES = (
    "Plover", "Godwit", "Dunlin", "Whimbrel", "Turnstone", "Sanderling", "Curlew", "Avocet",
    "Redshank", "Greenshank", "Phalarope", "Oystercatcher", "Lapwing", "Dotterel",
    "Woodcock", "Killdeer", "Willet", "Yellowlegs", "Jacana", "Pratincole", "Courser",
    "Sheathbill", "Gannet", "Puffin", "Guillemot", "Razorbill", "Auklet", "Murrelet",
    "Fulmar", "Petrel", "Shearwater", "Kittiwake", "Cormorant", "Bittern", "Spoonbill",
    "Merganser", "Eider", "Scoter", "Goldeneye", "Wigeon", "Pintail", "Garganey",
    "Shoveler", "Gadwall", "Smew", "Brant", "Skimmer", "Noddy",
)  # fmt: skip
# Services the unanswerable questions ask about: never planted anywhere.
ABSENT_SERVICES = ("Bobolink", "Dickcissel", "Grosbeak", "Towhee", "Vireo", "Phoebe")
IDENTIFIER_PREFIX = "CHG"

ATTRIBUTES_PER_SERVICE = 5
MULTIPART_QUESTIONS = 30
UNPLANTED_QUESTIONS = 14
ABSENT_QUESTIONS = 6
KIND_WEIGHTS = (
    ("paraphrase", 0.3),
    ("crosslingual", 0.15),
    ("temporal", 0.2),
    ("identifier", 0.15),
    ("thread-reply", 0.2),
)
FACT_CHANNELS = ("eng", "incidents", "data-platform", "product", "support", "deploys")
FIRST_DAY, LAST_DAY = 1, 58  # inside the 60 days every sample covers

# Words that carry no content: a question and its evidence may share these.
FUNCTION_WORDS = frozenset({
    "a", "about", "after", "all", "an", "and", "are", "as", "at", "be", "by", "can", "could",
    "did", "do", "does", "for", "from", "how", "i", "in", "is", "it", "its", "me", "of",
    "on", "or", "our", "s", "that", "the", "their", "them", "this", "to", "us", "was", "we",
    "were", "what", "when", "where", "which", "who", "with", "you",
})  # fmt: skip
_WORD = re.compile(r"[^\W\d_]+")


def content_words(text: str) -> set[str]:
    """Lower-cased words of `text` (letters only) that are not function words."""
    return {word for word in _WORD.findall(text.lower()) if word not in FUNCTION_WORDS}


@dataclass(frozen=True)
class Fact:
    """One planted fact: which service and attribute, how it was planted, which messages."""

    id: str
    kind: str
    service: str
    attribute: str
    value: str
    earlier_value: str | None = None
    identifier: str | None = None
    messages: tuple[PlantedMessage, ...] = ()
    # Message keys by role: "statement" (evidence), "earlier", "root", "side".
    roles: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    """One judged question: its text and the evidence groups (message keys) it needs."""

    id: str
    kind: str
    text: str
    groups: tuple[tuple[str, ...], ...]
    relevant: tuple[tuple[str, int], ...]
    facts: tuple[str, ...]
    allowed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class JudgedSet:
    """The planted facts, their messages and the judged questions about them."""

    seed: int
    facts: tuple[Fact, ...]
    questions: tuple[Question, ...]

    @property
    def messages(self) -> tuple[PlantedMessage, ...]:
        """Every planted message of every fact."""
        return tuple(message for fact in self.facts for message in fact.messages)


class _Clock:
    """Unique planted timestamps: whole seconds no other planted message uses."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used = {message.at for message in SAMPLE_MESSAGES}

    def at(self, day: int, after: datetime | None = None) -> datetime:
        while True:
            if after is None:
                start = datetime.fromtimestamp(EPOCH_START, UTC) + timedelta(days=day)
                moment = start + timedelta(seconds=self.rng.randrange(7 * 3600, 19 * 3600))
            else:
                moment = after + timedelta(seconds=self.rng.randrange(60, 1800))
            text = moment.strftime("%Y-%m-%d %H:%M:%S")
            if text not in self.used:
                self.used.add(text)
                return moment


def _authors(channel: str) -> list[str]:
    members = set(CONVERSATION_BY_NAME[channel].members)
    return [
        user.name
        for user in USER_BY_NAME.values()
        if user.id in members and not user.deleted and user.id != DEPLOYBOT.id
    ]


def _fill(template: str, service: str, value: str = "") -> str:
    return template.replace("{E}", service).replace("{v}", value)


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:]


def build_judged_set(seed: int = 7) -> JudgedSet:
    """Plant the facts and write the questions for `seed` (see the module docstring)."""
    rng = random.Random(f"slackquery-judged:{seed}")
    clock = _Clock(rng)
    kinds = [kind for kind, _ in KIND_WEIGHTS]
    weights = [weight for _, weight in KIND_WEIGHTS]
    facts: list[Fact] = []
    planted_for: dict[str, list[str]] = {}
    tickets = rng.sample(range(1000, 10000), len(SERVICES) * ATTRIBUTES_PER_SERVICE)
    for service in SERVICES:
        home = rng.choice(FACT_CHANNELS)
        for attribute in rng.sample(ATTRIBUTES, ATTRIBUTES_PER_SERVICE):
            kind = rng.choices(kinds, weights)[0]
            if kind == "crosslingual" and attribute.foreign is None:
                kind = "paraphrase"
            channel = home if rng.random() < 0.7 else rng.choice(FACT_CHANNELS)
            fact_id = f"{service.lower()}-{attribute.name}"
            ticket = f"{IDENTIFIER_PREFIX}-{tickets[len(facts)]}"
            facts.append(_plant(fact_id, kind, service, attribute, channel, ticket, rng, clock))
            planted_for.setdefault(service, []).append(attribute.name)
    questions = _questions(facts, planted_for, rng)
    return JudgedSet(seed, tuple(facts), tuple(questions))


def _plant(
    fact_id: str,
    kind: str,
    service: str,
    attribute: Attribute,
    channel: str,
    ticket: str,
    rng: random.Random,
    clock: _Clock,
) -> Fact:
    value, earlier = rng.sample(attribute.values, 2)
    authors = _authors(channel)
    day = rng.randrange(FIRST_DAY, LAST_DAY - 10)

    def message(role: str, text: str, when: datetime, **extra: object) -> PlantedMessage:
        key = f"g_{fact_id}_{role}"
        at = when.strftime("%Y-%m-%d %H:%M:%S")
        return PlantedMessage(key, channel, rng.choice(authors), at, text, **extra)

    messages: list[PlantedMessage] = []
    roles: dict[str, tuple[str, ...]] = {}
    if kind == "paraphrase":
        first = message("statement", _fill(attribute.say[0], service, value), clock.at(day))
        messages.append(first)
        if rng.random() < 0.5:
            later = clock.at(rng.randrange(day + 1, LAST_DAY))
            messages.append(message("restated", _fill(attribute.say[1], service, value), later))
        roles["statement"] = tuple(m.key for m in messages)
    elif kind == "crosslingual":
        language, template = attribute.foreign or ("", "")
        messages.append(
            message(f"statement_{language}", _fill(template, service, value), clock.at(day))
        )
        roles["statement"] = (messages[0].key,)
    elif kind == "temporal":
        old = message(
            "earlier", _fill(attribute.say[rng.randrange(2)], service, earlier), clock.at(day)
        )
        new = message(
            "statement",
            _fill(attribute.update, service, value),
            clock.at(rng.randrange(day + 7, LAST_DAY + 1)),
        )
        messages += [old, new]
        roles |= {"earlier": (old.key,), "statement": (new.key,)}
    elif kind == "identifier":
        text = f"{ticket}: {_fill(attribute.say[rng.randrange(2)], service, value)}"
        messages.append(message("statement", text, clock.at(day)))
        roles["statement"] = (messages[0].key,)
    else:  # thread-reply: the answer is a reply that never names the service
        root_at = clock.at(day)
        root = message("root", _fill(attribute.ask, service), root_at)
        reply_at = clock.at(day, after=root_at)
        answer = message(
            "statement", _fill(attribute.reply, service, value), reply_at, parent=root.key
        )
        side_text = rng.choice(SIDE_REPLIES)
        side = message("side", side_text, clock.at(day, after=root_at), parent=root.key)
        messages += sorted([root, answer, side], key=lambda m: m.at)
        roles |= {"root": (root.key,), "statement": (answer.key,), "side": (side.key,)}
    return Fact(
        fact_id,
        kind,
        service,
        attribute.name,
        value,
        earlier_value=earlier if kind == "temporal" else None,
        identifier=ticket if kind == "identifier" else None,
        messages=tuple(messages),
        roles=roles,
    )


def _questions(
    facts: list[Fact], planted_for: dict[str, list[str]], rng: random.Random
) -> list[Question]:
    questions: list[Question] = []

    def add(
        kind: str,
        text: str,
        groups: list[tuple[str, ...]],
        relevant: dict,
        fact_ids: tuple,
        allowed=(),
    ) -> None:
        questions.append(
            Question(
                f"G{len(questions) + 1:03d}",
                kind,
                _sentence(text),
                tuple(groups),
                tuple(relevant.items()),
                fact_ids,
                frozenset(allowed),
            )
        )

    for fact in facts:
        attribute = ATTRIBUTE_BY_NAME[fact.attribute]
        names = content_words(fact.service)
        statement = fact.roles["statement"]
        grades = {key: 3 if key == statement[0] else 2 for key in statement}
        if fact.kind == "temporal":
            frame = rng.choice(CURRENT_FRAMES)
            current = frame.replace("{q}", _lower_first(_fill(attribute.question, fact.service)))
            earlier = fact.roles["earlier"]
            add(
                "temporal-current",
                current,
                [statement],
                {statement[0]: 3, earlier[0]: 1},
                (fact.id,),
                names,
            )
            add(
                "temporal-earlier",
                _fill(attribute.earlier, fact.service),
                [earlier],
                {earlier[0]: 3, statement[0]: 1},
                (fact.id,),
                names,
            )
        elif fact.kind == "identifier":
            subject = IDENTIFIER_SUBJECT.replace("{id}", fact.identifier or "")
            text = _fill(attribute.question, subject)
            add(
                "identifier",
                text,
                [statement],
                grades,
                (fact.id,),
                content_words(fact.identifier or ""),
            )
        elif fact.kind == "thread-reply":
            relevant = {statement[0]: 3, fact.roles["root"][0]: 1}
            add(
                "thread-reply",
                _fill(attribute.question, fact.service),
                [statement],
                relevant,
                (fact.id,),
                names,
            )
        else:
            add(
                fact.kind,
                _fill(attribute.question, fact.service),
                [statement],
                grades,
                (fact.id,),
                names,
            )

    by_service: dict[str, list[Fact]] = {}
    for fact in facts:
        if fact.kind in ("paraphrase", "crosslingual"):
            by_service.setdefault(fact.service, []).append(fact)
    pairs = [group[:2] for group in by_service.values() if len(group) >= 2]
    for first, second in rng.sample(pairs, min(MULTIPART_QUESTIONS, len(pairs))):
        frame = rng.choice(MULTIPART_FRAMES)
        text = frame.replace("{a}", _fill(ATTRIBUTE_BY_NAME[first.attribute].clause, first.service))
        text = text.replace(
            "{b}", _fill(ATTRIBUTE_BY_NAME[second.attribute].clause, second.service)
        )
        groups = [first.roles["statement"], second.roles["statement"]]
        relevant = {key: 3 for group in groups for key in group}
        add(
            "multipart", text, groups, relevant, (first.id, second.id), content_words(first.service)
        )

    services = rng.sample(sorted(planted_for), UNPLANTED_QUESTIONS)
    for service in services:
        missing = [a for a in ATTRIBUTES if a.name not in planted_for[service]]
        add("unanswerable", _fill(rng.choice(missing).question, service), [], {}, ())
    for index in range(ABSENT_QUESTIONS):
        attribute = rng.choice(ATTRIBUTES)
        add("unanswerable", _fill(attribute.question, ABSENT_SERVICES[index]), [], {}, ())
    return questions


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:]


def query_document(judged: JudgedSet, request_time: str) -> dict:
    """The judged questions in the Beacon YAML layout, with message ids."""
    by_key = {message.key: message for message in judged.messages}
    facts = {fact.id: fact for fact in judged.facts}
    entries = []
    for question in judged.questions:
        answerable = bool(question.groups)
        entries.append(
            {
                "id": question.id,
                "type": question.kind,
                "split": "dev",
                "query": question.text,
                "answerable": answerable,
                "answer": "; ".join(facts[fact].value for fact in question.facts) or None,
                "evidence_groups": [
                    {"part": f"p{index}", "message_ids": [by_key[key].message_id for key in group]}
                    for index, group in enumerate(question.groups, start=1)
                ],
                "relevant": {by_key[key].message_id: grade for key, grade in question.relevant},
                "request_time": request_time,
                "fact_ids": list(question.facts),
                "generated": {"set": "judged", "seed": judged.seed},
            }
        )
    return {"queries": entries}
