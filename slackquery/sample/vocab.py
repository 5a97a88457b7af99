"""Word lists and sentence templates for the sample's background chatter.

Templates are grouped by topic, and topics recur across channels (the database comes up
in #eng, #incidents, #data-platform and DMs), so retrieval has to tell planted facts from
look-alike messages that share their vocabulary. Several templates of a topic say the
same thing in different words: these are the paraphrases. Fillers are drawn with Zipf
weights (list order is frequency order), which makes the overall term distribution
long-tailed like real chat.

Slots in templates, filled by `slackquery.sample.text`:
`{N}` topic noun, `{S}` service, `{E}` error code, `{T}` ticket key, `{V}` version,
`{U}` user mention, `{P}` first name, `{C}` channel link, `{H}` here/channel mention,
`{G}` user-group mention, `{D}` Slack date token, `{L}` labelled link, `{K}` inline code,
`{M}` emoji, `{X}` small number, `{DAY}` weekday, `{TIME}` clock time, `{F}` interjection,
`{ENV}` environment, `{Q}` measured quantity, `{O}` customer.

The background never uses the identifiers or the key phrases of the planted facts
(`slackquery.sample.planted`), and never the terms of the unanswerable queries; a test
checks both.
"""

SERVICES = (
    "ledger-api", "atlas-gateway", "courier-worker", "tidepool-web", "orders-db",
    "pgbouncer", "eta-service", "notifier", "billing-sync", "route-planner",
    "scan-uploader", "events-collector", "auth-service", "search-indexer", "label-printer",
)  # fmt: skip

CUSTOMERS = (
    "Northwind Freight", "Bluefin Logistics", "Kestrel Cargo", "Polar Parcel", "Saltmarsh Shipping",
    "Granite Haulage", "Aurora Couriers", "Fernwood Retail",
)  # fmt: skip

ENVIRONMENTS = ("staging", "production", "prod", "dev", "the preview env", "eu-west", "us-east")

ERROR_CODES = (
    "40P01", "57014", "23505", "53300", "08006", "ERR-17", "ERR-503", "ERR-9", "E1102",
    "ECONNRESET", "ETIMEDOUT", "HTTP 502", "OOMKilled", "CrashLoopBackOff", "0x80070005",
    "ERR-311", "SIGTERM", "HTTP 504",
)  # fmt: skip

TICKET_PREFIXES = ("OPS", "ENG", "SUP", "DATA", "WEB", "SEC")

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "next week", "tomorrow")

INTERJECTIONS = (
    "thanks!", "sounds good", "on it", "fwiw", "tbh", "lmk", "nice", "ack", "good catch",
    "makes sense", "+1", "will do", "hmm", "oh no", "agreed", "ty", "no rush", "ooh",
    "lgtm", "cc",
)  # fmt: skip

EMOJI = (
    "eyes", "white_check_mark", "tada", "thumbsup", "+1", "pray", "fire", "rocket",
    "sweat_smile", "thinking_face", "heavy_check_mark", "rotating_light", "coffee",
    "partyparrot", "shipit", "thumbsup::skin-tone-2", "raised_hands", "100", "bug", "wave",
)  # fmt: skip

QUANTITIES = (
    "~40ms", "p99 2.3s", "12%", "3x", "800 MB", "95%", "1.5k rps", "200ms", "4 GB", "30s",
    "half", "7 minutes", "0.2%", "two hours",
)  # fmt: skip

INLINE_CODE = (
    "kubectl rollout status deploy/ledger-api",
    "make migrate",
    "SELECT count(*) FROM shipments WHERE eta IS NULL",
    "pg_stat_activity",
    "npm run build",
    "dbt build -s stg_events",
    "terraform plan",
    "git bisect",
    "EXPLAIN ANALYZE",
    "max_connections",
    "feature_flags.yml",
    "helm rollback atlas-gateway",
    "VACUUM (ANALYZE)",
    "retry_backoff_ms",
    "curl -I https://api.fjordline.example/healthz",
)

CODE_BLOCKS = (
    "```\nkubectl -n prod get pods -l app=courier-worker\n"
    "kubectl -n prod logs deploy/courier-worker --since=10m | grep -i timeout\n```",
    "```\nERROR:  deadlock detected\nDETAIL:  Process 8812 waits for ShareLock on transaction"
    " 4471; blocked by process 9120.\n```",
    "```\nSELECT shipment_id, status, updated_at\nFROM shipments\nWHERE updated_at > now() -"
    " interval '1 hour'\nORDER BY updated_at DESC\nLIMIT 50;\n```",
    "```\n$ make test\n... 412 passed, 3 skipped, 1 xfailed in 84.21s\n```",
    "```\nretry:\n  attempts: 5\n  backoff_ms: 250\n  max_backoff_ms: 8000\n```",
    '```\n{"level":"warn","svc":"atlas-gateway","msg":"upstream timeout","upstream":'
    '"eta-service","elapsed_ms":30012}\n```',
    "```\ndef eta_bucket(minutes: int) -> str:\n    return 'late' if minutes > 30 else"
    " 'on_time'\n```",
)

LINKS = (
    ("runbook", "https://wiki.fjordline.example/runbooks/{slug}"),
    ("dashboard", "https://grafana.fjordline.example/d/{slug}"),
    ("PR", "https://github.com/fjordline/{slug}/pull/{n}"),
    ("design doc", "https://docs.fjordline.example/{slug}"),
    ("ticket", "https://fjordline.atlassian.example/browse/{slug}-{n}"),
    ("trace", "https://tracing.fjordline.example/trace/{n}"),
)
LINK_SLUGS = ("ledger-api", "courier", "tidepool-web", "eta", "billing", "routing", "events")

# Per topic: nouns (Zipf-weighted, most common first) and templates.
TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "database": {
        "nouns": (
            "the migration",
            "the replica",
            "connection pool",
            "the slow query",
            "vacuum",
            "the index on shipments",
            "lock contention",
            "the read replica lag",
            "schema change",
            "the backup job",
            "orders table",
            "disk usage on orders-db",
            "pg_dump",
            "the partition job",
            "autovacuum",
            "long transactions",
            "the foreign key",
        ),
        "templates": (
            "anyone else seeing {N} acting up on {ENV}? getting {E} from {S}",
            "{N} is slow again, {Q} on the {L}",
            "I'll run {K} on {ENV} after the standup",
            "heads up, {N} will be locked for a few minutes around {TIME}",
            "looks like {N} is what's blocking {S}, see {T}",
            "the {S} errors are {E}, probably {N} again",
            "can someone with db access check {N}? {U}",
            "we should add an alert on {N}, it bit us twice this month",
            "{N} finished in {Q}, way better than last time",
            "rolled back the change to {N}, {S} is healthy again",
            "query plan changed after {N}, {K} shows a seq scan now",
            "moving {N} to the new cluster is tracked in {T}",
            "is it safe to run {N} during business hours?",
            "{N} and {N} both spiked at {TIME}, coincidence?",
        ),
    },
    "release": {
        "nouns": (
            "the release",
            "the deploy",
            "the canary",
            "the hotfix",
            "the rollout",
            "the feature flag",
            "the release branch",
            "CI",
            "the build",
            "the rollback",
            "the release notes",
            "the merge queue",
            "the staging deploy",
            "the changelog",
        ),
        "templates": (
            "{N} for {S} {V} is out on {ENV} {M}",
            "holding {N} until {T} is merged",
            "{G} {N} is green, shipping {V} after lunch",
            "{N} failed on a flaky test, re-running",
            "who's driving {N} this week? I can take it {DAY}",
            "{N} is blocked, {S} integration tests time out on {ENV}",
            "can we get {T} into {N}? it's a one-liner",
            "reverted {N} of {S}, error rate went up {Q}",
            "{N} took {Q} today, the cache is cold again",
            "reminder: {N} goes out {DAY} at {TIME}",
            "{N} for {S} is planned for {D}",
            "cut {N} for {V}, changelog in the {L}",
            "pinning {S} to {V} until we understand {E}",
        ),
    },
    "api": {
        "nouns": (
            "the webhook",
            "pagination",
            "the auth token",
            "the public API",
            "latency",
            "the gateway timeout",
            "retries",
            "the OpenAPI spec",
            "the shipments endpoint",
            "error responses",
            "the SDK",
            "idempotency keys",
            "the batch endpoint",
            "request logging",
            "the response schema",
        ),
        "templates": (
            "{N} on {S} returns {E} for some tenants",
            "partners are asking about {N} again, {T}",
            "I changed {N} so it retries with backoff, PR in the {L}",
            "{S} {N} is at {Q} since the last deploy",
            "do we document {N} anywhere? couldn't find it in the {L}",
            "{N} breaks when the cursor is empty, repro: {K}",
            "bumped the timeout for {N} to {Q}",
            "{U} your change to {N} needs a version bump, {V}?",
            "we return {E} from {N} but the docs say 400",
            "{N} is fine, the slowness is in {S}",
            "let's not break {N} for existing integrations",
        ),
    },
    "frontend": {
        "nouns": (
            "the dashboard",
            "the shipment table",
            "dark mode",
            "the map view",
            "the bundle size",
            "the Android app",
            "the iOS build",
            "the date picker",
            "accessibility",
            "the login page",
            "the tracking widget",
            "design tokens",
            "the onboarding flow",
            "the CSV button",
            "layout shift",
        ),
        "templates": (
            "{N} renders twice on first load, see the {L}",
            "shipped a fix for {N}, should be live with {V}",
            "{N} looks off on small screens {M}",
            "can we ship {N} behind a flag first?",
            "{U} mockups for {N} are in Figma",
            "{N} regressed after the upgrade, {Q} slower",
            "the storybook for {N} is updated",
            "customers keep asking where {N} went",
            "{N} crashes with {E} on older phones",
            "pairing on {N} {DAY}, anyone want to join?",
        ),
    },
    "incident": {
        "nouns": (
            "the alert",
            "the pager",
            "error budget",
            "the outage",
            "the postmortem",
            "the latency spike",
            "disk pressure",
            "the status page",
            "the SLO",
            "the 5xx rate",
            "memory usage",
            "the queue backlog",
            "the health check",
        ),
        "templates": (
            "{H} {N} fired for {S}, looking",
            "{N} on {S}: {E}, mitigated by restarting pods",
            "resolved: {N} cleared at {TIME}, writing up {T}",
            "{N} is flapping again, I'll tune the threshold",
            "who owns {N} for {S}? {G}",
            "{N} burned {Q} of the monthly budget",
            "status page updated, {N} is back to normal",
            "timeline for {N} is in the {L}",
            "we got paged for {N} at {TIME} but it self-healed",
            "{N} correlates with the {S} deploy, rolling back",
            "can we mute {N} during the maintenance window?",
            "action items from {N}: alert tuning, runbook, {T}",
        ),
    },
    "product": {
        "nouns": (
            "the roadmap",
            "onboarding",
            "pricing",
            "the beta",
            "customer feedback",
            "the launch",
            "churn",
            "the pilot",
            "the pricing page",
            "NPS",
            "the renewal",
            "the demo",
        ),
        "templates": (
            "notes from the call with {O}: they want better ETA accuracy",
            "{N} is slipping a week, updated the {L}",
            "{N} moves to {D}, {O} is fine with that",
            "{U} can you join the sync about {N} {DAY}?",
            "{O} asked for an API to pull proof of delivery",
            "we're prioritising {N} over the map redesign this quarter",
            "feedback on {N} has been mostly positive {M}",
            "draft for {N} is up, comments welcome",
            "numbers for {N}: {Q} up since last month",
            "let's revisit {N} after the board meeting",
            "{O} wants SLAs in the contract, looping in {P}",
        ),
    },
    "support": {
        "nouns": (
            "the ticket",
            "a customer",
            "the refund request",
            "the invoice",
            "the CSV",
            "the tracking link",
            "a driver",
            "the label printer",
            "the account",
            "the password reset",
            "the escalation",
            "the macro",
            "the queue",
        ),
        "templates": (
            "{N} from {S} users: {E} when uploading, {T}",
            "escalating {N}, customer is on the enterprise plan",
            "{P} can you look at {N}? they're blocked",
            "closed {N}, it was a browser cache thing",
            "queue is at {X} open, {N} is the oldest",
            "{N} says the tracking page shows the wrong ETA",
            "anyone know how to fix {N} stuck in pending?",
            "added a macro for {N}, saves a few minutes each",
            "{N} reports {E} again, same as {T}",
        ),
    },
    "data": {
        "nouns": (
            "the pipeline",
            "the backfill",
            "the events table",
            "the warehouse",
            "the dbt run",
            "the dashboard",
            "schema drift",
            "the nightly job",
            "the Kafka topic",
            "late events",
            "the funnel report",
            "the dedupe step",
        ),
        "templates": (
            "{N} failed overnight with {E}, re-running",
            "{N} is {Q} behind, investigating",
            "added tests to {N}, {K} catches the nulls now",
            "numbers from {N} don't match the product dashboard",
            "backfilling {N} for the last {X} days",
            "{U} can we freeze changes to {N} while I migrate it?",
            "{N} cost went up {Q} this month",
            "documented {N} in the {L}",
        ),
    },
    "security": {
        "nouns": (
            "the access review",
            "MFA",
            "the dependency bump",
            "the pen test",
            "the secrets scan",
            "the audit log",
            "the CVE",
            "API keys",
            "least privilege",
            "the phishing test",
        ),
        "templates": (
            "{N} is due {DAY}, please finish yours {G}",
            "{N} closes on {D}",
            "{N} flagged {S}, patch in {V}",
            "reminder to enable {N} on your accounts",
            "{N} results are in the {L}",
            "rotated {N} for {S}, nothing should break",
            "tracking {N} in {T}",
        ),
    },
    "office": {
        "nouns": (
            "the all-hands",
            "the holiday calendar",
            "interviews",
            "the new laptops",
            "the hiring plan",
            "the team dinner",
            "1:1s",
            "the office move",
            "the quarterly planning",
            "the onboarding buddy list",
        ),
        "templates": (
            "{H} {N} is {DAY} at {TIME}",
            "{N} is on {D}, agenda to follow",
            "please update {N} before Friday",
            "{N} got moved, new invite coming",
            "slides from {N} are in the {L}",
            "{P} is organising {N}, ping them with questions",
            "thanks everyone for {N} {M}",
        ),
    },
    "social": {
        "nouns": (
            "lunch",
            "coffee",
            "the hike",
            "the playlist",
            "the book club",
            "pizza",
            "the weekend",
            "the cat pics",
            "board games",
            "the running group",
            "the weather",
            "the sauna",
            "the concert",
        ),
        "templates": (
            "who's in for {N} {DAY}? {M}",
            "{N} was great, thanks {U}",
            "anyone have recommendations for {N}?",
            "{N} photos in the thread {M}",
            "happy {DAY} everyone {M}",
            "{N} again? count me in",
            "ok {N} was a mistake {M}",
        ),
    },
}

# Generic work templates; a topic's noun fills {N}.
GENERIC_TEMPLATES = (
    "quick update on {N}: {F}",
    "I'll take a look at {N} after lunch",
    "{U} can you review my change to {N}? {T}",
    "does anyone know who owns {N}?",
    "{N} is on my list for {DAY}",
    "writing up {N} now, will share in {C}",
    "sorry, missed this. {N} is still open",
    "{F} {N} looks fine to me",
    "I think {N} can wait until after the release",
    "moved the discussion about {N} to {C}",
)

REPLY_TEMPLATES = (
    "{F}",
    "{F} {M}",
    "I can take this",
    "same here, seeing {E} too",
    "looking now",
    "fixed in {T}",
    "{U} might know",
    "probably {N}, let me check",
    "yep, confirmed on {ENV}",
    "not sure, it worked {DAY}",
    "{F} thanks {U}",
    "merged {M}",
    "can you share the logs?",
    "I'll pair with you on {N}",
    "that matches what I saw at {TIME}",
)

BOT_DEPLOY_TEMPLATES = (
    ":rocket: Deployed *{S}* {V} to {ENV} (build #{X}) by {U}",
    ":white_check_mark: Canary for *{S}* {V} healthy after 15 min, promoting",
    ":warning: Rollback of *{S}* to {V} on {ENV} requested by {U}",
    "Deploy of *{S}* {V} to {ENV} failed: `{E}`. See {L}",
)

BOT_PAGER_TEMPLATES = (
    ":rotating_light: Triggered: {S} {E} rate above threshold on {ENV} ({Q})",
    ":large_green_circle: Resolved: {S} health check on {ENV}",
    "Acknowledged by {P}: {S} latency {Q}",
)

FILE_KINDS = (
    ("png", "image/png", "screenshot"),
    ("pdf", "application/pdf", "report"),
    ("csv", "text/csv", "export"),
    ("txt", "text/plain", "logs"),
    ("sql", "text/plain", "query"),
)

SYSTEM_TOPICS = (
    "Release week: freeze rules pinned",
    "Incident commander this week: see pins",
    "Q2 planning",
    "Ship small, ship often",
)
