"""Planted facts and the judged queries about them.

Each fact is stated once by its planted message (grade 3), restated or paraphrased by
one to three other messages, sometimes in other channels (grade 2), and surrounded by
distractors that share its vocabulary without answering the question (ungraded, or
grade 1 when they are related context such as a superseded decision). All of them sit
at fixed timestamps inside the first 60 days, which every sample covers, so their
message ids are the same for every N and every seed.

Planted timestamps have a microsecond part that is a multiple of 1000; background
messages never do (see `generator`), so the two can never collide.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from slackquery.sample.workspace import CONVERSATION_BY_NAME, TEAM_ID, USER_BY_NAME


def _at(handle: str) -> str:
    return f"<@{USER_BY_NAME[handle].id}>"


@dataclass(frozen=True)
class PlantedMessage:
    """One fixed message of the corpus. `parent` names the planted thread root it replies to."""

    key: str
    channel: str
    author: str
    at: str
    text: str
    parent: str | None = None
    broadcast: bool = False
    reactions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    edited_after_s: int | None = None

    @property
    def ts(self) -> str:
        """The Slack ts: the fixed second plus a per-message millisecond part."""
        seconds = int(datetime.fromisoformat(self.at).replace(tzinfo=UTC).timestamp())
        micros = (sum(self.key.encode()) * 389 % 997 + 1) * 1000
        return f"{seconds}.{micros:06d}"

    @property
    def ts_us(self) -> int:
        """Microseconds since the epoch, exactly."""
        seconds, micros = self.ts.split(".")
        return int(seconds) * 1_000_000 + int(micros)

    @property
    def message_id(self) -> str:
        """The importer's message key for this message: `team:channel:ts`."""
        return f"{TEAM_ID}:{CONVERSATION_BY_NAME[self.channel].id}:{self.ts}"


_M = PlantedMessage

MESSAGES: tuple[PlantedMessage, ...] = (
    # F01: the staging password rotation broke logins (SQLSTATE 28P01).
    _M(
        "f01_distractor",
        "eng",
        "nnamdi",
        "2024-03-11 15:20:00",
        "Production database credentials rotate on the first Monday of April; staging goes "
        "first this week as a dry run. No action needed from app teams.",
    ),
    _M(
        "f01_planted",
        "incidents",
        "jose",
        "2024-03-12 09:47:12",
        "<!here> staging login is down since this morning's database password rotation: every "
        'request fails with `FATAL: password authentication failed for user "ledger_app"` '
        "(SQLSTATE 28P01). The rotation job updated Vault, but pgbouncer still holds the old "
        "secret. Tracking in OPS-1287.",
        reactions=(("eyes", ("zoe", "priya")), ("rotating_light", ("tomas",))),
    ),
    _M(
        "f01_restated",
        "eng",
        "priya",
        "2024-03-12 10:05:03",
        "FYI the 28P01 errors you're hitting on staging are not your code: the pgbouncer pool "
        f"kept the pre-rotation credential. {_at('jose')} is on it in <#C0SQINC03|incidents>.",
    ),
    _M(
        "f01_fixed",
        "incidents",
        "jose",
        "2024-03-12 10:31:40",
        "Fixed: restarted pgbouncer so it re-read the new credential from Vault, and staging "
        "logins work again. Follow-up in OPS-1287: make pgbouncer reload on rotation instead "
        "of caching the secret.",
        parent="f01_planted",
        reactions=(("white_check_mark", ("zoe", "priya", "tomas")),),
    ),
    _M(
        "f01_distractor2",
        "support",
        "samir",
        "2024-03-13 11:02:00",
        "Customer login on production is fine; the password reset emails just land in spam "
        "for Outlook users (SUP-5402).",
    ),
    # F02: the deploy freeze moved from Friday to Thursday.
    _M(
        "f02_distractor",
        "product",
        "marcus",
        "2024-03-14 11:15:00",
        "The mobile app store submission for Q2 stays on Friday; marketing copy must be final "
        "by then.",
    ),
    _M(
        "f02_planted",
        "eng",
        "zoe",
        "2024-03-14 16:02:31",
        "Change of plan for the quarter-end release: the deploy freeze moves from Friday to "
        "Thursday 18:00 CET. After that nothing merges to main without a "
        "<!subteam^S0SQREL01|@release-captains> sign-off.",
        reactions=(("thumbsup", ("priya", "aiko", "jose")),),
    ),
    _M(
        "f02_restated",
        "general",
        "hannah",
        "2024-03-15 08:30:00",
        "Reminder <!channel>: code freeze for the end-of-quarter release now starts Thursday "
        "evening, not Friday.",
    ),
    # F03: the export cap, decided and later corrected.
    _M(
        "f03_superseded",
        "product",
        "marcus",
        "2024-03-18 14:00:00",
        "Decision: the shipment history CSV export is capped at 10,000 rows per download for "
        "the v2.4 launch.",
    ),
    _M(
        "f03_planted",
        "product",
        "marcus",
        "2024-03-27 09:12:45",
        "Correction to last week's decision: after the Northwind Freight call we're raising the "
        "export cap to 50,000 rows, not 10k. Anything larger goes through the async job that "
        "emails a download link.",
        edited_after_s=240,
    ),
    _M(
        "f03_restated",
        "support",
        "samir",
        "2024-03-28 10:40:00",
        "Heads up <!subteam^S0SQSUP01|@support-team>: customers can now download up to 50k rows "
        "of shipment history at once; bigger exports arrive by email.",
    ),
    # F04: ERR-42 on Android photo uploads.
    _M(
        "f04_planted",
        "support",
        "samir",
        "2024-03-20 13:25:10",
        "Android users get ERR-42 when the courier scan uploads a photo over 8 MB: "
        "atlas-gateway rejects the body with 413. Workaround until the fix: lower the camera "
        "resolution in the app settings. Ticket SUP-5521.",
    ),
    _M(
        "f04_restated",
        "support",
        "aiko",
        "2024-03-20 14:02:00",
        "ERR-42 is the 8 MB request body limit on atlas-gateway. I'm raising it to 20 MB in "
        "v2.3.2 :rocket:",
        parent="f04_planted",
    ),
    # F05: v2.3.1 is the last release with the legacy invoices endpoint.
    _M(
        "f05_planted",
        "eng",
        "priya",
        "2024-03-22 11:48:20",
        "ledger-api v2.3.1 is the last release that still serves the legacy `/v1/invoices` "
        "endpoint. From v2.4.0 it answers 410 Gone, so partners have to move to `/v2/invoices` "
        "first.",
    ),
    _M(
        "f05_restated",
        "product",
        "marcus",
        "2024-03-25 15:10:00",
        "For partner comms: the old invoices API goes away with the 2.4 release. Anyone still "
        "calling it needs to switch before then.",
    ),
    # F06: on-call rotation moved to two weeks, handover on Tuesdays.
    _M(
        "f06_planted",
        "general",
        "ingrid",
        "2024-03-08 09:05:00",
        "Starting March 19 the on-call handover moves to Tuesdays at 10:00, and each rotation "
        "lasts two weeks instead of one.",
    ),
    _M(
        "f06_restated",
        "incidents",
        "jose",
        "2024-03-19 10:02:00",
        "New pager schedule is live: primaries swap every other Tuesday morning now. "
        "<!subteam^S0SQONC01|@oncall> check your calendars.",
    ),
    # F07: ClickHouse chosen over Druid for analytics events.
    _M(
        "f07_related",
        "data-platform",
        "lukasz",
        "2024-04-01 16:00:00",
        "Benchmarks for the events store: Druid ingests faster, ClickHouse answers our funnel "
        "queries faster. Decision this week.",
    ),
    _M(
        "f07_planted",
        "data-platform",
        "lukasz",
        "2024-04-02 14:30:00",
        "We picked ClickHouse over Druid for the product analytics events store: cheaper at "
        "our volume and everyone already knows SQL. Migration plan in DATA-311.",
    ),
    _M(
        "f07_restated",
        "eng",
        "lukasz",
        "2024-04-03 09:20:00",
        "Closing the loop from <#C0SQDAT07|data-platform>: the clickstream warehouse is going "
        "to be ClickHouse, Druid is out.",
    ),
    # F08: the API outage of April 4 was an expired TLS certificate.
    _M(
        "f08_planted",
        "incidents",
        "nnamdi",
        "2024-04-04 03:05:00",
        "Postmortem INC-2024-017: the TLS certificate for api.fjordline.example expired at "
        "02:00 UTC because the cert-manager renewal cronjob was still paused after the cluster "
        "upgrade. 47 minutes of partial API outage.",
    ),
    _M(
        "f08_restated",
        "eng",
        "zoe",
        "2024-04-04 09:40:00",
        "After INC-2024-017 let's alert 14 days before any certificate expires. The paused "
        "renewal job would have been caught.",
    ),
    # F09: the dashboard palette (author-filtered query).
    _M(
        "f09_planted",
        "product",
        "chloe",
        "2024-03-26 16:20:00",
        "Final palette for the dashboard refresh: primary #0B5FFF, warning amber #F5A623, and "
        "the old teal is retired. Figma: <https://figma.example.com/file/tidepool-refresh|"
        "Tidepool refresh>",
        reactions=(("heart_eyes", ("marcus", "aiko")),),
    ),
    _M(
        "f09_restated",
        "eng",
        "aiko",
        "2024-03-27 10:00:00",
        "Swapping the teal for the new #0B5FFF primary in the web app design tokens today.",
    ),
    # F10: two SRE hires approved (private channel).
    _M(
        "f10_planted",
        "leadership",
        "ingrid",
        "2024-03-29 17:10:00",
        "Budget approved: we hire two more SREs in Q2, one of them based in Lisbon. Headcount "
        "req HR-88.",
    ),
    _M(
        "f10_restated",
        "mpdm-zoe--jose--priya-1",
        "zoe",
        "2024-04-01 09:15:00",
        f"Good news, two extra SRE seats for Q2 got approved. One will sit in Lisbon with you "
        f"{_at('jose')} :tada:",
    ),
    # F11: why test_route_eta_rollover was flaky.
    _M(
        "f11_planted",
        "eng",
        "tomas",
        "2024-04-09 10:12:00",
        "Root cause of the flaky `test_route_eta_rollover`: it builds the date in local time, "
        "so it fails between 23:00 and 00:00 UTC. Fixed in PR #2291 by freezing the clock "
        "with freezegun.",
    ),
    _M(
        "f11_restated",
        "eng",
        "priya",
        "2024-04-09 10:20:00",
        "Thanks! That explains why the ETA rollover test only failed on the nightly runs.",
        parent="f11_planted",
    ),
    # F12: José covers the Postgres 16 upgrade while Zoë is away (DM).
    _M(
        "f12_planted",
        "dm-zoe-jose",
        "zoe",
        "2024-03-15 13:00:00",
        "Could you take over the Postgres 16 upgrade runbook? I'm out from April 15 to April 26.",
    ),
    _M(
        "f12_restated",
        "dm-zoe-jose",
        "jose",
        "2024-03-15 13:04:00",
        "Sure, I'll own the pg16 upgrade while you're away.",
    ),
    _M(
        "f12_restated2",
        "eng",
        "zoe",
        "2024-04-12 16:00:00",
        f"While I'm on leave {_at('jose')} drives the Postgres 16 upgrade, ping him with "
        "questions.",
    ),
    # F13: the public API rate limit doubled.
    _M(
        "f13_planted",
        "eng",
        "priya",
        "2024-04-11 11:30:00",
        "Public API rate limit is now 600 requests per minute per token (was 300). Bursts "
        "above that get HTTP 429 with a Retry-After header.",
    ),
    _M(
        "f13_distractor",
        "eng",
        "nnamdi",
        "2024-04-11 15:00:00",
        "The internal admin API still has no rate limit at all, tracked in OPS-1302.",
    ),
    _M(
        "f13_restated",
        "support",
        "samir",
        "2024-04-15 09:45:00",
        "Customers hitting 429s: the cap doubled to 600/min per token last week, so most "
        "integrations should be fine now.",
    ),
    # F14: Safari 15 support dropped (thread with a broadcast reply).
    _M(
        "f14_question",
        "eng",
        "aiko",
        "2024-04-16 10:00:00",
        "Do we still need to support Safari 15 in the web app? It blocks the new container "
        "queries.",
    ),
    _M(
        "f14_usage",
        "eng",
        "marcus",
        "2024-04-16 10:12:00",
        "Usage data says Safari 15 is under 0.4% of sessions.",
        parent="f14_question",
    ),
    _M(
        "f14_planted",
        "eng",
        "zoe",
        "2024-04-16 10:30:00",
        "Decision: we drop Safari 15 support with the May release. Aiko, go ahead with "
        "container queries.",
        parent="f14_question",
        broadcast=True,
    ),
    # F15: the offsite in Bergen.
    _M(
        "f15_planted",
        "general",
        "hannah",
        "2024-04-18 12:00:00",
        "The summer offsite is in Bergen on <!date^1717405200^{date_short}|June 3, 2024>, two "
        "nights at the Fjordhotel. Travel form: "
        "<https://wiki.fjordline.example/offsite-2024|offsite page>",
        reactions=(("tada", ("zoe", "jose", "aiko", "chloe")),),
    ),
    _M(
        "f15_restated",
        "random",
        "ingrid",
        "2024-04-18 12:30:00",
        "Bergen in June, bring a raincoat :umbrella_with_rain_drops:",
    ),
)

BY_KEY = {message.key: message for message in MESSAGES}

# Identifiers only planted messages may use: the background generator redraws these.
RESERVED_IDENTIFIERS = frozenset(
    {"OPS-1287", "OPS-1302", "SUP-5521", "SUP-5402", "DATA-311", "v2.3.1", "v2.3.2", "v2.4.0"}
)
# Terms that occur only in planted messages, so exact-identifier queries have exactly the
# planted answers (the vocabulary in `vocab` simply never contains them).
PLANTED_ONLY_TERMS = RESERVED_IDENTIFIERS | {
    "28P01", "ERR-42", "INC-2024-017", "test_route_eta_rollover", "HR-88", "ClickHouse",
    "Druid", "Bergen", "Safari", "#0B5FFF", "freezegun", "pg16",
}  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One sub-claim of an answer and the messages any one of which covers it."""

    id: str
    fact_ids: tuple[str, ...]
    claim: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Query:
    """One judged query. `relevant` maps planted keys to grades 3/2/1."""

    id: str
    type: str
    tags: tuple[str, ...]
    query: str
    answer: str | None
    parts: tuple[Part, ...] = ()
    relevant: tuple[tuple[str, int], ...] = ()
    channel: str | None = None
    author: str | None = None
    after: str | None = None
    before: str | None = None
    absence_terms: tuple[str, ...] = ()
    conclusion: str | None = None

    @property
    def fact_ids(self) -> list[str]:
        """Fact ids of all parts, in order of first mention."""
        return list(dict.fromkeys(fact for part in self.parts for fact in part.fact_ids))


def _p(part_id: str, fact: str, claim: str, *evidence: str) -> Part:
    return Part(part_id, (fact,), claim, evidence)


QUERIES: tuple[Query, ...] = (
    Query(
        "S01",
        "exact",
        ("F01", "easy"),
        "What does SQLSTATE 28P01 on staging mean and how was it fixed?",
        "Staging logins failed with password authentication errors after the database password "
        "rotation because pgbouncer kept the old secret; restarting pgbouncer so it re-read "
        "the new credential from Vault fixed it (OPS-1287).",
        (
            _p(
                "p1",
                "F01",
                "pgbouncer kept the old secret after the password rotation",
                "f01_planted",
                "f01_restated",
            ),
            _p(
                "p2",
                "F01",
                "Restarting pgbouncer with the new credential fixed staging logins",
                "f01_fixed",
            ),
        ),
        (("f01_planted", 3), ("f01_fixed", 3), ("f01_restated", 2), ("f01_distractor", 1)),
    ),
    Query(
        "S02",
        "paraphrase",
        ("F02", "paraphrase"),
        "When is the cutoff for landing code before the big March ship, and who can approve "
        "exceptions?",
        "The deploy freeze starts Thursday 18:00 CET (moved from Friday); after it only the "
        "release captains can sign off merges.",
        (
            _p(
                "p1",
                "F02",
                "The freeze starts Thursday 18:00 CET instead of Friday",
                "f02_planted",
                "f02_restated",
            ),
            _p("p2", "F02", "Merges after the freeze need release-captain sign-off", "f02_planted"),
        ),
        (("f02_planted", 3), ("f02_restated", 2)),
    ),
    Query(
        "S03",
        "fact",
        ("F03", "correction"),
        "How many rows can a customer export from shipment history?",
        "50,000 rows per download (corrected from the earlier 10,000); larger exports are "
        "emailed by an async job.",
        (
            _p("p1", "F03", "The export cap is 50,000 rows", "f03_planted", "f03_restated"),
            _p("p2", "F03", "Larger exports are sent by email", "f03_planted", "f03_restated"),
        ),
        (("f03_planted", 3), ("f03_restated", 2), ("f03_superseded", 1)),
    ),
    Query(
        "S04",
        "exact",
        ("F04", "easy"),
        "What causes ERR-42 on Android and what is the fix?",
        "Photos over 8 MB hit the atlas-gateway request body limit (413); lower the camera "
        "resolution until v2.3.2 raises the limit to 20 MB.",
        (
            _p(
                "p1",
                "F04",
                "Uploads over 8 MB are rejected by atlas-gateway",
                "f04_planted",
                "f04_restated",
            ),
            _p("p2", "F04", "The limit is raised to 20 MB in v2.3.2", "f04_restated"),
        ),
        (("f04_planted", 3), ("f04_restated", 2)),
    ),
    Query(
        "S05",
        "exact",
        ("F05",),
        "Which ledger-api version is the last one with the legacy /v1/invoices endpoint?",
        "v2.3.1; from v2.4.0 the endpoint answers 410 Gone.",
        (_p("p1", "F05", "v2.3.1 is the last release serving /v1/invoices", "f05_planted"),),
        (("f05_planted", 3), ("f05_restated", 2)),
    ),
    Query(
        "S06",
        "paraphrase",
        ("F06", "paraphrase"),
        "How long does one person stay first responder for production emergencies, and which "
        "day does that duty change hands?",
        "Two weeks; the handover is on Tuesdays at 10:00.",
        (
            _p("p1", "F06", "Rotations last two weeks", "f06_planted", "f06_restated"),
            _p("p2", "F06", "Handover is Tuesday at 10:00", "f06_planted", "f06_restated"),
        ),
        (("f06_planted", 3), ("f06_restated", 2)),
    ),
    Query(
        "S07",
        "paraphrase",
        ("F07", "paraphrase"),
        "Which engine did we choose to hold user tracking data, and why?",
        "ClickHouse (over Druid): cheaper at our volume and the team already knows SQL.",
        (
            _p("p1", "F07", "ClickHouse was chosen over Druid", "f07_planted", "f07_restated"),
            _p("p2", "F07", "Cheaper at our volume and everyone knows SQL", "f07_planted"),
        ),
        (("f07_planted", 3), ("f07_restated", 2), ("f07_related", 1)),
    ),
    Query(
        "S08",
        "filtered",
        ("F08", "channel_filter"),
        "Why was the API down in the early morning of April 4?",
        "The TLS certificate for api.fjordline.example expired because the cert-manager "
        "renewal cronjob was still paused after the cluster upgrade (INC-2024-017).",
        (_p("p1", "F08", "An expired TLS certificate caused the outage", "f08_planted"),),
        (("f08_planted", 3),),
        channel="incidents",
        after="2024-04-04",
        before="2024-04-05",
    ),
    Query(
        "S09",
        "filtered",
        ("F09", "author_filter"),
        "What colours did Chloé pick for the dashboard refresh?",
        "Primary #0B5FFF and warning amber #F5A623; the old teal is retired.",
        (_p("p1", "F09", "Primary #0B5FFF, warning #F5A623, teal retired", "f09_planted"),),
        (("f09_planted", 3),),
        author="chloe",
    ),
    Query(
        "S10",
        "fact",
        ("F10", "private_channel"),
        "How many site reliability engineers are we adding next quarter, and where?",
        "Two SREs in Q2, one of them based in Lisbon.",
        (
            _p("p1", "F10", "Two SRE hires approved for Q2", "f10_planted", "f10_restated"),
            _p("p2", "F10", "One of them is based in Lisbon", "f10_planted", "f10_restated"),
        ),
        (("f10_planted", 3), ("f10_restated", 2)),
    ),
    Query(
        "S11",
        "exact",
        ("F11",),
        "Why did test_route_eta_rollover fail intermittently?",
        "It built the date in local time and failed between 23:00 and 00:00 UTC; fixed in "
        "PR #2291 with freezegun.",
        (_p("p1", "F11", "Local-time date construction broke it near midnight", "f11_planted"),),
        (("f11_planted", 3), ("f11_restated", 2)),
    ),
    Query(
        "S12",
        "fact",
        ("F12", "accents"),
        "Who is covering the Postgres 16 upgrade while Zoë is away?",
        "José owns the pg16 upgrade while Zoë is out (April 15-26).",
        (
            _p(
                "p1",
                "F12",
                "José takes over the Postgres 16 upgrade",
                "f12_restated",
                "f12_restated2",
            ),
        ),
        (("f12_planted", 3), ("f12_restated", 2), ("f12_restated2", 2)),
    ),
    Query(
        "S13",
        "paraphrase",
        ("F13", "paraphrase"),
        "How many calls can an integration make each minute before it gets throttled?",
        "600 requests per minute per token (was 300); above that HTTP 429 with Retry-After.",
        (
            _p(
                "p1",
                "F13",
                "The limit is 600 requests/min per token",
                "f13_planted",
                "f13_restated",
            ),
        ),
        (("f13_planted", 3), ("f13_restated", 2)),
    ),
    Query(
        "S14",
        "fact",
        ("F14", "thread"),
        "Do we still support older Safari versions in the web app?",
        "No: Safari 15 support is dropped with the May release (under 0.4% of sessions).",
        (
            _p("p1", "F14", "Safari 15 support is dropped in the May release", "f14_planted"),
            _p("p2", "F14", "Safari 15 is under 0.4% of sessions", "f14_usage"),
        ),
        (("f14_planted", 3), ("f14_usage", 2), ("f14_question", 1)),
    ),
    Query(
        "S15",
        "fact",
        ("F15",),
        "When and where is the team offsite?",
        "In Bergen on June 3, 2024, two nights at the Fjordhotel.",
        (_p("p1", "F15", "The offsite is in Bergen on June 3, 2024", "f15_planted"),),
        (("f15_planted", 3), ("f15_restated", 2)),
    ),
    Query(
        "S16",
        "unanswerable",
        (),
        "What is the company's parental leave policy?",
        None,
        absence_terms=("parental leave",),
        conclusion="No leave policy is discussed anywhere in the workspace.",
    ),
    Query(
        "S17",
        "unanswerable",
        (),
        "Which single sign-on provider do customers use to log in to Tidepool?",
        None,
        absence_terms=("single sign-on", "sso", "okta"),
        conclusion="No identity provider or single sign-on setup is discussed.",
    ),
)

_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "before", "by", "can", "did", "do", "does",
    "for", "from", "how", "in", "is", "it", "of", "on", "one", "or", "the", "to", "was",
    "we", "what", "when", "where", "which", "who", "why", "with",
})  # fmt: skip
_TOKEN = re.compile(r"[\w][\w.-]*[\w]|[\w]")


def _content_tokens(text: str) -> set[str]:
    return {token for token in _TOKEN.findall(text.lower()) if token not in _STOPWORDS}


def lexical_overlap(query: Query) -> float | None:
    """Share of the query's content words that occur in its grade-3 messages."""
    planted = [BY_KEY[key].text for key, grade in query.relevant if grade == 3]
    if not planted:
        return None
    wanted = _content_tokens(query.query)
    found = set().union(*(_content_tokens(text) for text in planted))
    return round(len(wanted & found) / len(wanted), 3) if wanted else 0.0


def query_document(request_time: str) -> dict:
    """The judged query file as a dict in the Beacon YAML layout, ids as message keys."""
    entries = []
    for query in QUERIES:
        filters = {
            "channel": query.channel,
            "author": query.author,
            "after": query.after,
            "before": query.before,
        }
        if query.type == "unanswerable":
            entries.append(
                {
                    "id": query.id,
                    "type": query.type,
                    "split": "dev",
                    "tags": list(query.tags),
                    "query": query.query,
                    "answerable": False,
                    "answer": None,
                    "evidence_groups": [],
                    "absence_check": {
                        "terms": dict.fromkeys(query.absence_terms, 0),
                        "conclusion": query.conclusion,
                    },
                    "answer_type": "unanswerable",
                    "parts": [],
                    "request_time": request_time,
                    "filters": filters,
                    "relevant": {},
                    "lexical_overlap": None,
                    "fact_ids": [],
                }
            )
            continue
        entries.append(
            {
                "id": query.id,
                "type": query.type,
                "split": "dev",
                "tags": list(query.tags),
                "query": query.query,
                "answerable": True,
                "answer": query.answer,
                "evidence_groups": [
                    {
                        "part": part.id,
                        "message_ids": [BY_KEY[key].message_id for key in part.evidence],
                    }
                    for part in query.parts
                ],
                "parts": [
                    {"id": part.id, "fact_ids": list(part.fact_ids), "claim": part.claim}
                    for part in query.parts
                ],
                "request_time": request_time,
                "filters": filters,
                "answer_type": "fact",
                "relevant": {BY_KEY[key].message_id: grade for key, grade in query.relevant},
                "lexical_overlap": lexical_overlap(query),
                "fact_ids": query.fact_ids,
            }
        )
    return {"queries": entries}
