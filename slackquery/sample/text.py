"""Background message text: templates from `vocab` with their slots filled in.

Speed matters (a million messages in well under three minutes), so templates are parsed
once into literal/slot parts, and every weighted choice is one `random()` call into a
precomputed lookup table instead of `random.choices`.
"""

import random
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from slackquery.sample import vocab
from slackquery.sample.workspace import USER_GROUPS, Conversation

_SLOT = re.compile(r"\{([A-Z]+)\}")
_TABLE_SIZE = 1024
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

Template = tuple[tuple[bool, str], ...]


def zipf_table(items: Sequence, exponent: float = 1.1, size: int = _TABLE_SIZE) -> list:
    """A lookup list in which item k (0-based) appears about size/(k+1)^exponent times.

    Picking a uniform index into it samples the items with Zipf weights; every item
    appears at least once so nothing in a list is unreachable.
    """
    weights = [1.0 / (rank + 1) ** exponent for rank in range(len(items))]
    total = sum(weights)
    table: list = []
    for item, weight in zip(items, weights, strict=True):
        table.extend([item] * max(1, round(size * weight / total)))
    return table


def weighted_table(pairs: Sequence[tuple[object, float]], size: int = 256) -> list:
    """A lookup list that samples each item in proportion to its weight."""
    total = sum(weight for _, weight in pairs)
    table: list = []
    for item, weight in pairs:
        table.extend([item] * max(1, round(size * weight / total)))
    return table


def compile_template(template: str) -> Template:
    """Split a template into (is_slot, text) parts once, so rendering is a join."""
    parts: list[tuple[bool, str]] = []
    position = 0
    for match in _SLOT.finditer(template):
        if match.start() > position:
            parts.append((False, template[position : match.start()]))
        parts.append((True, match.group(1)))
        position = match.end()
    if position < len(template):
        parts.append((False, template[position:]))
    return tuple(parts)


def _compile_all(templates: Sequence[str]) -> list[Template]:
    return zipf_table([compile_template(template) for template in templates], exponent=0.6)


TOPIC_TEMPLATES = {name: _compile_all(topic["templates"]) for name, topic in vocab.TOPICS.items()}
TOPIC_NOUNS = {name: zipf_table(topic["nouns"]) for name, topic in vocab.TOPICS.items()}
GENERIC = _compile_all(vocab.GENERIC_TEMPLATES)
REPLIES = _compile_all(vocab.REPLY_TEMPLATES)
BOT_DEPLOY = [compile_template(template) for template in vocab.BOT_DEPLOY_TEMPLATES]
BOT_PAGER = [compile_template(template) for template in vocab.BOT_PAGER_TEMPLATES]
SERVICES = zipf_table(vocab.SERVICES)
ERRORS = zipf_table(vocab.ERROR_CODES)
INTERJECTIONS = zipf_table(vocab.INTERJECTIONS)
EMOJI = zipf_table(vocab.EMOJI)
INLINE_CODE = zipf_table(vocab.INLINE_CODE, exponent=0.8)
QUANTITIES = zipf_table(vocab.QUANTITIES, exponent=0.8)
ENVIRONMENTS = zipf_table(vocab.ENVIRONMENTS)
CUSTOMERS = zipf_table(vocab.CUSTOMERS)
WEEKDAYS = zipf_table(vocab.WEEKDAYS, exponent=0.5)


def date_fallback(epoch_seconds: int) -> str:
    """The English fallback Slack puts after `|` in a date token, e.g. `Mar 14, 2024`."""
    day = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    return f"{_MONTHS[day.month - 1]} {day.day}, {day.year}"


class TextGenerator:
    """Renders background text for one conversation from one seeded `random.Random`.

    `now` (epoch seconds) is set by the caller before each message so date tokens point
    at plausible days; `reserved` holds identifiers only planted facts may use.
    """

    def __init__(
        self,
        rng: random.Random,
        conversation: Conversation,
        channel_links: Sequence[tuple[str, str]],
        people: Sequence[tuple[str, str]],
        reserved: frozenset[str],
    ) -> None:
        self.rng = rng
        self.now = 0
        self.reserved = reserved
        humans = [member for member in conversation.members if not member.startswith("U0SQBOT")]
        self.mentions = zipf_table([f"<@{member}>" for member in humans], exponent=0.7)
        self.first_names = zipf_table([first for _, first in people], exponent=0.7)
        self.channels = [f"<#{channel_id}|{name}>" for channel_id, name in channel_links]
        self.topic_table = weighted_table(conversation.topics)
        self.slots: dict[str, Callable[[], str]] = {
            "N": self._noun,
            "S": lambda: self._pick(SERVICES),
            "E": lambda: self._pick(ERRORS),
            "T": self._ticket,
            "V": self._version,
            "U": lambda: self._pick(self.mentions),
            "P": lambda: self._pick(self.first_names),
            "C": lambda: self._pick(self.channels),
            "H": lambda: "<!here>" if self.rng.random() < 0.8 else "<!channel>",
            "G": self._group,
            "D": self._date,
            "L": self._link,
            "K": lambda: f"`{self._pick(INLINE_CODE)}`",
            "M": lambda: f":{self._pick(EMOJI)}:",
            "X": lambda: str(int(2 + self.rng.paretovariate(1.2) * 3)),
            "DAY": lambda: self._pick(WEEKDAYS),
            "TIME": lambda: f"{self.rng.randrange(7, 20):02d}:{self.rng.randrange(0, 60, 15):02d}",
            "F": lambda: self._pick(INTERJECTIONS),
            "ENV": lambda: self._pick(ENVIRONMENTS),
            "Q": lambda: self._pick(QUANTITIES),
            "O": lambda: self._pick(CUSTOMERS),
        }
        self.topic = "social"

    def _pick(self, table: Sequence[str]) -> str:
        return table[int(self.rng.random() * len(table))]

    def _noun(self) -> str:
        return self._pick(TOPIC_NOUNS[self.topic])

    def _ticket(self) -> str:
        while True:
            prefix = vocab.TICKET_PREFIXES[int(self.rng.random() * len(vocab.TICKET_PREFIXES))]
            ticket = f"{prefix}-{self.rng.randrange(100, 5000)}"
            if ticket not in self.reserved:
                return ticket

    def _version(self) -> str:
        while True:
            version = f"v{self.rng.randrange(1, 4)}.{self.rng.randrange(0, 10)}"
            version += f".{self.rng.randrange(0, 12)}"
            if version not in self.reserved:
                return version

    def _group(self) -> str:
        group_id, handle = USER_GROUPS[int(self.rng.random() * len(USER_GROUPS))]
        return f"<!subteam^{group_id}|{handle}>"

    def _date(self) -> str:
        when = self.now + self.rng.randrange(1, 21) * 86_400
        return f"<!date^{when}^{{date_short}}|{date_fallback(when)}>"

    def _link(self) -> str:
        label, pattern = vocab.LINKS[int(self.rng.random() * len(vocab.LINKS))]
        slug = vocab.LINK_SLUGS[int(self.rng.random() * len(vocab.LINK_SLUGS))]
        url = pattern.format(slug=slug, n=self.rng.randrange(100, 99_999))
        if self.rng.random() < 0.15:
            return f"<{url}>"
        return f"<{url}|{label}>"

    def render(self, template: Template) -> str:
        """Fill one compiled template."""
        slots = self.slots
        return "".join(slots[text]() if is_slot else text for is_slot, text in template)

    def pick_topic(self) -> str:
        """Draw the subject of the next message from this conversation's topic weights."""
        self.topic = self._pick(self.topic_table)
        return self.topic

    def message(self) -> str:
        """A top-level message: one to three sentences on the current topic, plus extras."""
        rng = self.rng
        pool = TOPIC_TEMPLATES[self.topic]
        roll = rng.random()
        count = 1 if roll < 0.6 else 2 if roll < 0.9 else 3
        text = ""
        for _ in range(count):
            source = GENERIC if self.topic != "social" and rng.random() < 0.25 else pool
            sentence = self.render(source[int(rng.random() * len(source))])
            if not text:
                text = sentence
            elif text[-1] in "?!.":
                text = f"{text} {sentence}"
            else:
                text = f"{text}. {sentence}"
        extra = rng.random()
        if extra < 0.04:
            text += "\n" + vocab.CODE_BLOCKS[int(rng.random() * len(vocab.CODE_BLOCKS))]
        elif extra < 0.07:
            text += " see " + self._link()
        elif extra < 0.12:
            text = f"{self._pick(self.mentions)} {text}"
        if rng.random() < 0.08:
            text += f" :{self._pick(EMOJI)}:"
        return text

    def reply(self) -> str:
        """A thread reply: short, often just an acknowledgement, on the parent's topic."""
        if self.rng.random() < 0.35:
            pool = TOPIC_TEMPLATES[self.topic]
            return self.render(pool[int(self.rng.random() * len(pool))])
        return self.render(REPLIES[int(self.rng.random() * len(REPLIES))])

    def bot_deploy(self) -> str:
        """Text of a deploybot notification."""
        return self.render(BOT_DEPLOY[int(self.rng.random() * len(BOT_DEPLOY))])

    def bot_pager(self) -> str:
        """Text of a legacy pager-webhook notification."""
        return self.render(BOT_PAGER[int(self.rng.random() * len(BOT_PAGER))])
