"""The fictional team behind the sample export: Fjordline Labs, who build "Tidepool".

Everything here is fixed data, so the ids that the judged query file names (users,
channels, DMs) are the same for every seed and every message count. Only the extra
`proj-*` channels, which give big samples a realistic channel count, depend on N.
"""

from dataclasses import dataclass

TEAM_ID = "T0SAMPLE1"
TEAM_DOMAIN = "fjordline"
TEAM_NAME = "Fjordline Labs"

# 2024-03-04 00:00:00 UTC, a Monday: day 0 of every sample's timeline.
EPOCH_START = 1_709_510_400
DAY_SECONDS = 86_400


@dataclass(frozen=True)
class User:
    """One member of the sample team, as users.json describes it."""

    id: str
    name: str
    real_name: str
    display_name: str
    title: str
    tz: str
    tz_label: str
    tz_offset: int
    deleted: bool = False
    is_bot: bool = False
    is_admin: bool = False
    bot_id: str | None = None


@dataclass(frozen=True)
class Conversation:
    """One conversation of the export and how busy it is.

    `kind` is `public`, `private`, `dm` or `group_dm`; `weight` is its share of the
    generated background messages; `topics` weights the subjects people talk about there.
    """

    id: str
    name: str
    kind: str
    members: tuple[str, ...]
    weight: float
    topics: tuple[tuple[str, float], ...]
    created_day: int = -30
    creator: str = "U0SQ00009"
    topic: str = ""
    purpose: str = ""
    is_general: bool = False
    is_archived: bool = False
    bot_share: float = 0.0

    @property
    def folder(self) -> str:
        """The export folder: the name for channels and group DMs, the id for DMs."""
        return self.id if self.kind == "dm" else self.name


CET = ("Europe/Oslo", "Central European Time", 3600)
WET = ("Europe/Lisbon", "Western European Time", 0)
EST = ("America/New_York", "Eastern Standard Time", -18000)
JST = ("Asia/Tokyo", "Japan Standard Time", 32400)

USERS: tuple[User, ...] = (
    User("U0SQ00001", "zoe", "Zoë Ångström", "Zoë", "Engineering Lead", *CET, is_admin=True),
    User("U0SQ00002", "jose", "José Núñez", "José N.", "Site Reliability Engineer", *WET),
    User("U0SQ00003", "priya", "Priya Raman", "priya", "Backend Engineer", *CET),
    User("U0SQ00004", "marcus", "Marcus Webb", "Marcus", "Product Manager", *EST),
    User("U0SQ00005", "aiko", "Aiko Tanaka", "aiko.t", "Frontend Engineer", *JST),
    User("U0SQ00006", "lukasz", "Łukasz Wróbel", "Łukasz", "Data Engineer", *CET),
    User("U0SQ00007", "chloe", "Chloé Dubois", "Chloé", "Product Designer", *CET),
    User("U0SQ00008", "samir", "Samir Haddad", "", "Support Lead", *WET),
    User("U0SQ00009", "ingrid", "Ingrid Solberg", "Ingrid", "CTO", *CET, is_admin=True),
    User("U0SQ00010", "tomas", "Tomás Ortega", "Tomás", "QA Engineer", *WET),
    User("U0SQ00011", "nnamdi", "Nnamdi Okafor", "Nnamdi O.", "Security Engineer", *EST),
    User("U0SQ00012", "hannah", "Hannah Becker", "Hannah", "Operations Manager", *CET),
    User("U0SQ00013", "bjorn", "Björn Lund", "Björn", "Contractor", *CET, deleted=True),
    User("U0SQBOT01", "deploybot", "Deploybot", "", "", *CET, is_bot=True, bot_id="B0SQDEPLOY"),
)

USER_BY_NAME = {user.name: user for user in USERS}
HUMANS = tuple(user for user in USERS if not user.is_bot and not user.deleted)
DEPLOYBOT = USER_BY_NAME["deploybot"]
# A legacy incoming-webhook integration: its messages carry a bot_id and a username but
# no user id, as old exports have them.
PAGER_BOT_ID = "B0SQPAGER1"
PAGER_BOT_NAME = "pagerduty"

# User groups, mentioned as <!subteam^ID|@handle>.
USER_GROUPS = (
    ("S0SQENG01", "@eng-team"),
    ("S0SQREL01", "@release-captains"),
    ("S0SQONC01", "@oncall"),
    ("S0SQSUP01", "@support-team"),
)


def _ids(*names: str) -> tuple[str, ...]:
    return tuple(USER_BY_NAME[name].id for name in names)


ALL_HUMANS = tuple(user.id for user in HUMANS) + _ids("bjorn")
ENGINEERS = _ids("zoe", "jose", "priya", "aiko", "lukasz", "tomas", "nnamdi", "ingrid", "bjorn")

BASE_CONVERSATIONS: tuple[Conversation, ...] = (
    Conversation(
        "C0SQGEN01",
        "general",
        "public",
        ALL_HUMANS + _ids("deploybot"),
        0.07,
        (("office", 3), ("product", 1), ("release", 1), ("social", 1)),
        is_general=True,
        topic="Company-wide announcements",
        purpose="This channel is for team-wide communication and announcements.",
    ),
    Conversation(
        "C0SQENG02",
        "eng",
        "public",
        ENGINEERS + _ids("marcus", "deploybot"),
        0.20,
        (("database", 3), ("release", 3), ("api", 3), ("frontend", 2), ("security", 1)),
        creator="U0SQ00001",
        topic="Engineering chatter. Incidents go to #incidents.",
        purpose="Design, code review and day-to-day engineering.",
    ),
    Conversation(
        "C0SQINC03",
        "incidents",
        "public",
        ENGINEERS + _ids("samir", "marcus"),
        0.08,
        (("incident", 5), ("database", 2), ("api", 2), ("security", 1)),
        creator="U0SQ00002",
        topic="Active incidents: <!subteam^S0SQONC01|@oncall> is paged",
        purpose="Outages, alerts and postmortems.",
        bot_share=0.15,
    ),
    Conversation(
        "C0SQPRD04",
        "product",
        "public",
        _ids("marcus", "chloe", "zoe", "aiko", "samir", "ingrid", "priya"),
        0.10,
        (("product", 5), ("frontend", 2), ("data", 1)),
        creator="U0SQ00004",
        topic="Roadmap, launches, customer feedback",
        purpose="Product decisions and the roadmap.",
    ),
    Conversation(
        "C0SQRND05",
        "random",
        "public",
        ALL_HUMANS,
        0.08,
        (("social", 6), ("office", 1)),
        topic="Non-work banter and water cooler conversation",
        purpose="A place for non-work-related flimflam.",
    ),
    Conversation(
        "C0SQSUP06",
        "support",
        "public",
        _ids("samir", "marcus", "priya", "tomas", "aiko", "hannah"),
        0.10,
        (("support", 5), ("api", 1), ("product", 1)),
        creator="U0SQ00008",
        topic="Customer tickets that need engineering eyes",
        purpose="Escalations from the support queue.",
    ),
    Conversation(
        "C0SQDAT07",
        "data-platform",
        "public",
        _ids("lukasz", "priya", "zoe", "marcus", "ingrid"),
        0.07,
        (("data", 6), ("database", 1)),
        creator="U0SQ00006",
        topic="Warehouse, pipelines and dashboards",
        purpose="Everything about the analytics stack.",
    ),
    Conversation(
        "C0SQDEP08",
        "deploys",
        "public",
        ENGINEERS + _ids("deploybot"),
        0.07,
        (("release", 4), ("incident", 1)),
        creator="U0SQ00002",
        topic="Deploy log (deploybot posts here)",
        purpose="Automated deploy notifications and rollbacks.",
        bot_share=0.7,
    ),
    Conversation(
        "C0SQOLD09",
        "ops-legacy",
        "public",
        _ids("jose", "bjorn", "zoe"),
        0.01,
        (("incident", 2), ("database", 1)),
        created_day=-400,
        creator="U0SQ00013",
        topic="Archived: use #incidents",
        purpose="Old on-premises operations channel.",
        is_archived=True,
    ),
    Conversation(
        "G0SQLDR01",
        "leadership",
        "private",
        _ids("ingrid", "zoe", "marcus", "hannah"),
        0.03,
        (("office", 3), ("product", 2), ("security", 1)),
        creator="U0SQ00009",
        topic="Leadership sync",
        purpose="Hiring, budget and planning. Private.",
    ),
    Conversation(
        "D0SQDM001",
        "dm-zoe-jose",
        "dm",
        _ids("zoe", "jose"),
        0.03,
        (("database", 2), ("incident", 1), ("social", 1)),
    ),
    Conversation(
        "D0SQDM002",
        "dm-marcus-chloe",
        "dm",
        _ids("marcus", "chloe"),
        0.02,
        (("product", 3), ("frontend", 2)),
    ),
    Conversation(
        "D0SQDM003",
        "dm-samir-priya",
        "dm",
        _ids("samir", "priya"),
        0.02,
        (("support", 3), ("api", 2)),
    ),
    Conversation(
        "G0SQMP001",
        "mpdm-zoe--jose--priya-1",
        "group_dm",
        _ids("zoe", "jose", "priya"),
        0.03,
        (("database", 2), ("release", 2), ("social", 1)),
        creator="U0SQ00001",
        purpose="Group messaging with: @zoe @jose @priya",
    ),
)

CONVERSATION_BY_NAME = {conversation.name: conversation for conversation in BASE_CONVERSATIONS}

# Names for the extra project channels of large samples (proj-<name>).
PROJECT_NAMES = (
    "atlas", "borealis", "cobalt", "delta-sync", "ember", "fathom", "glacier", "harbor-map",
    "isobar", "juniper", "kelp", "lodestar", "meridian", "nimbus", "orca", "pelagic",
    "quay", "riptide", "skerry", "tern", "umber", "vesper", "wharf", "xenon", "yawl",
    "zephyr", "anchor", "beacon-light", "current", "drift", "estuary", "floe", "gale",
    "hull", "inlet", "jetty", "keel", "lagoon", "mooring", "narwhal",
)  # fmt: skip
PROJECT_TOPICS = ("api", "frontend", "data", "database", "release", "product")


def project_conversations(messages: int) -> tuple[Conversation, ...]:
    """Extra public channels for big samples: one per 25,000 messages, at most 40.

    A million-message workspace with eight channels would be unrealistic; these give
    retrieval a wider, noisier haystack without touching the planted conversations.
    """
    count = min(len(PROJECT_NAMES), messages // 25_000)
    people = [user.id for user in HUMANS]
    result = []
    for index in range(count):
        name = PROJECT_NAMES[index]
        members = tuple(people[(index + offset) % len(people)] for offset in range(0, 12, 2))
        first, second = PROJECT_TOPICS[index % 6], PROJECT_TOPICS[(index + 2) % 6]
        result.append(
            Conversation(
                f"C0SQX{index + 1:04d}",
                f"proj-{name}",
                "public",
                members,
                0.02,
                ((first, 3), (second, 1), ("social", 0.3)),
                created_day=index * 5,
                creator=members[0],
                topic=f"Project {name.replace('-', ' ').title()}",
                purpose=f"Working channel for project {name}.",
            )
        )
    return tuple(result)
