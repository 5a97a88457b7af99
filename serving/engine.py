"""The retrieval engine: lexical, semantic and hybrid search over the published artifact.

`SearchEngine` is the one production search path: the MCP tools, `slackquery search`, the
evaluation harness and the benchmark all call `search(request, fusion)`. It resolves the
`current.duckdb` pointer on every call and keeps one in-memory `LoadedArtifact` per
resolved file, so publishing a new artifact takes effect on the next request with no
restart, and requests already running on the old artifact finish on it (the old one is
closed once its last request ends).
"""

import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from serving import lookups
from serving.access import Requester, Visibility, channel_of
from serving.arms import ARMS, Arm
from serving.artifact import (
    CONVERSATION_TYPES,
    MOVE_OFF_DAMAGED,
    READ_ERRORS,
    ArtifactUnavailable,
    Filters,
    LoadedArtifact,
)
from serving.budget import Deadline
from serving.context import QueryContext
from serving.cursor import CursorCodec, fingerprint
from serving.fusion import FusionConfig, fuse
from serving.lexical import QueryTerms
from serving.lookups import Row
from serving.models import (
    ArmSignal,
    AttachedFile,
    MessageRecord,
    MessageResponse,
    ScopeRecord,
    ScopesResponse,
    SearchHitBase,
    SearchRequest,
    SearchResponse,
    ThreadResponse,
    hit_model,
)
from serving.permalink import is_url, parse_permalink
from serving.query import (
    NEWEST,
    ParsedQuery,
    classify_route,
    content_tokens,
    fts_tokens,
    has_searchable_content,
    is_unicode_text,
    parse_query,
)
from serving.ranking import ArmRanking, FusedHit, top_candidates
from serving.semantic import SEARCHES, QueryEmbedder
from serving.stages import STAGES, Stage
from slackquery.artifacts.pointer import current_target, no_current_reason
from slackquery.embedding.base import Embedder, ensure_same_generation
from slackquery.errors import SlackqueryError
from slackquery.escaping import quoted
from slackquery.settings import Settings

MAX_FILTER_VALUE_CHARS = 200
MAX_CONTEXT_MESSAGES = 100
# A time filter below 1973-03-03 is seconds or milliseconds given for microseconds (no Slack
# message is that old), one past the year 9999 nanoseconds: a note says so.
_BEFORE_1973_US = 10**14
_LAST_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
MAX_THREAD_LIMIT = 500
MAX_SCOPE_LIMIT = 500
# get_thread's note for a message with no replies, read as a thread of its own.
NO_REPLIES_NOTE = (
    "this message has no replies: it is shown as a thread of its own; get_slack_message with "
    "context_before/context_after reads the conversation around it"
)
# MessageRecord and SearchHit fields copied from a display row as they are.
_RECORD_COLUMNS = (
    "document_id",
    "source_message_id",
    "workspace_id",
    "workspace_name",
    "channel_id",
    "channel_name",
    "conversation_type",
    "author_id",
    "author_name",
    "ts_us",
    "thread_id",
    "thread_root_id",
    "permalink",
)


def _default_embedder_factory(settings: Settings) -> Callable[[], Embedder]:
    def build() -> Embedder:
        from slackquery.embedding import build_embedder

        return build_embedder(settings)

    return build


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def when(ts_us: int) -> str:
    """`iso_timestamp`, or what a time no calendar date holds is: before 1 or after 9999."""
    try:
        return iso_timestamp(ts_us)
    except OverflowError:
        return "after the year 9999" if ts_us > 0 else "before the year 1"


def _outside_span_note(
    filters: Filters, artifact: LoadedArtifact, visible: Visibility | None
) -> list[str]:
    """A note when the time filter keeps none of the messages the requester may see: an
    empty page would read as "never said" (`during:april` is the latest April past, which
    an archive of older years does not hold)."""
    start, end = filters.start_ts_us, filters.end_ts_us
    if start is None and end is None:
        return []
    first, last = span_us = artifact.time_span_us(visible)
    overlaps = (start is None or start <= last) and (end is None or end >= first)
    if overlaps or span_us == (0, 0):  # (0, 0): the requester may see no message
        return []
    return [
        f"the time filter keeps messages posted {period_words(start, end)} (UTC days), and "
        f"the archive you may search runs {period_words(first, last)}"
    ]


def period_words(start_us: int | None, end_us: int | None) -> str:
    """`from YYYY-MM-DD to YYYY-MM-DD` (UTC days), either end left out when open."""
    ends = (("from", start_us), ("to", end_us))
    return " ".join(f"{word} {utc_day(ts_us)}" for word, ts_us in ends if ts_us is not None)


def utc_day(ts_us: int) -> str:
    """`YYYY-MM-DD` (UTC), or, for a time beyond the calendar, `when`'s words for it."""
    try:
        return iso_timestamp(ts_us)[:10]
    except OverflowError:
        return when(ts_us)


def iso_timestamp(ts_us: int) -> str:
    """ISO 8601 UTC with microseconds, for citation. Integer arithmetic: a float of the
    microseconds rounds the last ones of the year 9999 up into a year no datetime holds."""
    return (_EPOCH + timedelta(microseconds=ts_us)).isoformat()


def _fusion_key(fusion: FusionConfig) -> str:
    """The ranking knobs as text for the cursor fingerprint (the default one is cached).

    Sets are listed sorted: a frozenset's repr follows the process's string hash seed, so
    two processes sharing SLACKQUERY_CURSOR_SECRET would otherwise refuse each other's
    cursors about half the time."""
    return repr(
        [
            (name, sorted(value) if isinstance(value, frozenset | set) else value)
            for name, value in sorted(asdict(fusion).items(), key=lambda item: item[0])
        ]
    )


class _Entry:
    def __init__(self, artifact: LoadedArtifact):
        self.artifact = artifact
        self.users = 0


def _attached_files(row: Row) -> list[AttachedFile]:
    """A display row's files (its `files` column is their JSON list, null when none)."""
    listed = row["files"]
    return [AttachedFile(**file) for file in json.loads(listed)] if listed else []  # type: ignore[arg-type]


class SearchEngine:
    """Search and lookups over whatever artifact `current.duckdb` names at call time."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        embedder_factory: Callable[[], Embedder] | None = None,
        arms: tuple[Arm, ...] = ARMS,
        stages: tuple[Stage, ...] = STAGES,
    ):
        self.settings = settings
        self.arms = arms
        self.stages = stages
        self._hit_model = hit_model(arms)
        self._artifacts = settings.artifact_path.resolve()
        if embedder is not None:
            factory: Callable[[], Embedder] = lambda: embedder  # noqa: E731
        else:
            factory = embedder_factory or _default_embedder_factory(settings)
        self.query_embedder = QueryEmbedder(factory)
        self.cursors = CursorCodec(settings.cursor_secret)
        self._default_fusion = FusionConfig(candidate_window=settings.search_candidate_window)
        self._default_fusion_key = _fusion_key(self._default_fusion)
        self._entries: dict[Path, _Entry] = {}
        self._latest: Path | None = None
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()

    # -- artifact lifecycle -----------------------------------------------------------
    def resolve(self) -> Path:
        """The artifact file `current.duckdb` points at now: one `readlink` per request (the
        pointer names a file of the artifact folder, which is resolved once)."""
        target = current_target(self._artifacts)
        if target is None:
            raise ArtifactUnavailable(no_current_reason(self._artifacts))
        return self._artifacts / target

    @contextmanager
    def artifact(self) -> Iterator[LoadedArtifact]:
        """The current artifact, held for the duration of one request.

        A request's read error that damaged files explain (`LoadedArtifact.check_damage`)
        is raised as `DamagedArtifact`, and so is every later request on that artifact:
        `status` too, so the server is not ready until a publish moves the pointer off it."""
        path = self.resolve()
        entry = self._entry(path)
        try:
            entry.artifact.refuse_if_damaged()
            yield entry.artifact
        except READ_ERRORS as error:
            entry.artifact.check_damage(error)
            raise
        finally:
            with self._lock:
                entry.users -= 1
                self._evict()

    def _entry(self, path: Path) -> _Entry:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                entry.users += 1
                self._note_latest(path)
                return entry
        # One load at a time: concurrent first requests wait for the same load.
        with self._load_lock:
            with self._lock:
                entry = self._entries.get(path)
            if entry is None:
                if not path.exists():
                    raise ArtifactUnavailable(
                        f"published artifact {path} is missing; {MOVE_OFF_DAMAGED}"
                    )
                entry = _Entry(LoadedArtifact(path))
            with self._lock:
                self._entries.setdefault(path, entry)
                entry = self._entries[path]
                entry.users += 1
                self._note_latest(path)
                return entry

    def _note_latest(self, path: Path) -> None:
        if self._latest != path:
            self._latest = path
            self._evict()

    def _evict(self) -> None:
        for path, entry in list(self._entries.items()):
            if path != self._latest and entry.users == 0:
                del self._entries[path]
                entry.artifact.close()

    def status(self) -> dict[str, object]:
        """Readiness: the current artifact's identity (loading it if needed).

        Raises `GenerationMismatchError` when the configured embedder is of another
        generation than the artifact's vectors: every hybrid and semantic search would
        fail, so the server is not ready even though lexical search works. The check is the
        one each search makes (an HTTP embedder validates its endpoint on first use)."""
        with self.artifact() as artifact:
            ensure_same_generation(self.query_embedder.embedder.identity, artifact.generation_id)
            return {
                "ready": True,
                "artifact_id": artifact.build_id,
                "generation_id": artifact.generation_id,
                "documents": artifact.row_count,
                "messages": artifact.message_count,
            }

    def close(self) -> None:
        """Close every cached artifact (tests and shutdown)."""
        with self._lock:
            for entry in self._entries.values():
                entry.artifact.close()
            self._entries.clear()
            self._latest = None

    # -- search -----------------------------------------------------------------------
    def _validate(self, request: SearchRequest) -> None:
        settings = self.settings
        if not 1 <= request.limit <= settings.search_max_results:
            raise SlackqueryError(f"limit must be between 1 and {settings.search_max_results}")
        if len(request.query) > settings.search_max_query_chars:
            raise SlackqueryError(
                f"query is {len(request.query)} characters; the maximum is "
                f"{settings.search_max_query_chars}"
            )
        if not is_unicode_text(request.query):
            raise SlackqueryError("query is not valid UTF-8 text")
        for name in ("workspace_ids", "channel_ids", "author_ids", "conversation_types"):
            values = getattr(request, name)
            if values is None:
                continue
            if len(values) > settings.search_max_filter_values:
                raise SlackqueryError(
                    f"too many {name} filter values ({len(values)}); the maximum is "
                    f"{settings.search_max_filter_values}"
                )
            for value in values:
                if not value.strip() or len(value) > MAX_FILTER_VALUE_CHARS:
                    raise SlackqueryError(
                        f"{name} values must be non-empty and at most "
                        f"{MAX_FILTER_VALUE_CHARS} characters"
                    )
        for value in request.conversation_types or ():
            if value not in CONVERSATION_TYPES:
                raise SlackqueryError(
                    f"unknown conversation type {value!r}; use {', '.join(CONVERSATION_TYPES)}"
                )
        if (
            request.start_ts_us is not None
            and request.end_ts_us is not None
            and request.start_ts_us > request.end_ts_us
        ):
            raise SlackqueryError("start_ts_us must not be after end_ts_us")

    def _filters(
        self,
        artifact: LoadedArtifact,
        request: SearchRequest,
        parsed,
        visible: Visibility | None = None,
    ) -> Filters:
        def merged(
            explicit: Sequence[str] | None,
            implied: Sequence[str],
            resolve: Callable[..., tuple[str, ...]],
            what: str,
        ) -> tuple[str, ...] | None:
            """Ids both the request's filter list and the query's operators name."""
            ids = resolve(explicit, visible) if explicit else None
            if not implied:
                return ids
            named = resolve(implied, visible)
            if ids is None:
                return named
            both = tuple(sorted(set(ids) & set(named)))
            if not both:  # as dates that leave no time: an error, not an empty page
                raise SlackqueryError(
                    f"the {what} filters leave nothing to search: the query's "
                    f"{', '.join(implied)} is none of {', '.join(explicit or ())}"
                )
            return both

        channels = merged(
            request.channel_ids, parsed.channel_names, artifact.resolve_channels, "channel"
        )
        authors = merged(request.author_ids, parsed.user_names, artifact.resolve_authors, "author")
        starts = [v for v in (request.start_ts_us, parsed.start_ts_us) if v is not None]
        ends = [v for v in (request.end_ts_us, parsed.end_ts_us) if v is not None]
        if starts and ends and max(starts) > min(ends):
            raise SlackqueryError(
                f"the dates leave no time to search: from {when(max(starts))} to "
                f"{when(min(ends))} (before: and after: exclude the day they name)"
            )
        return Filters(
            workspace_ids=(
                artifact.resolve_workspaces(request.workspace_ids, visible)
                if request.workspace_ids
                else None
            ),
            channel_ids=channels,
            author_ids=authors,
            conversation_types=(
                tuple(sorted(set(request.conversation_types)))
                if request.conversation_types
                else None
            ),
            start_ts_us=max(starts) if starts else None,
            end_ts_us=min(ends) if ends else None,
            is_thread=parsed.is_thread,
            has_link=parsed.has_link,
            # a phrase without a word narrows nothing (phrase_mask skips it)
            phrases=tuple(phrase for phrase in parsed.phrases if fts_tokens(phrase)),
            excluded=tuple(item for item in parsed.excluded if fts_tokens(item)),
        )

    def _context(
        self,
        artifact: LoadedArtifact,
        request: SearchRequest,
        parsed: ParsedQuery,
        filters: Filters,
        fusion: FusionConfig,
        visible: Visibility | None = None,
    ) -> QueryContext:
        """The shared context of one search, after the checks that need the artifact."""
        text = parsed.text
        listing = not has_searchable_content(text)
        if listing and filters.is_empty():
            raise SlackqueryError(
                "query has no searchable text (letters, digits or emoji) besides operators; "
                "with a filter alone (in:, from:, before:, after:, on:, during:, is:thread, "
                "has:link) it lists the messages the filter keeps, newest first"
            )
        max_tokens = self.settings.search_max_query_tokens
        terms = artifact.bm25.query_terms(text, max_tokens, parsed.phrases)
        if visible is not None:
            terms = visible_terms(artifact, terms, visible, text, parsed.phrases)
        notes: list[str] = []
        if terms.dropped:
            notes.append(
                f"only the first {max_tokens} distinct query tokens were used "
                f"({terms.dropped} dropped)"
            )
        if terms.unknown:
            unknown = ", ".join(quoted(term) for term in terms.unknown[:10])
            notes.append(f"terms found in no message: {unknown}")
        for name in ("start_ts_us", "end_ts_us"):
            value = getattr(request, name)
            if value is not None and value != 0 and not _BEFORE_1973_US <= value <= _LAST_US:
                notes.append(
                    f"{name}={value} is {when(value)}: it takes microseconds since the epoch "
                    "(seconds x 1,000,000; nanoseconds / 1,000)"
                )
        notes.extend(_outside_span_note(filters, artifact, visible))
        # The share of messages semantic ranking can reach: recorded by the build, or of
        # the messages the requester may see.
        coverage = (
            None
            if request.mode == "lexical" or listing
            else visible.vector_coverage
            if visible is not None
            else float(artifact.metadata["vector_coverage"])
        )
        if coverage is not None and coverage < 1:
            notes.append(
                f"semantic ranking covers {coverage:.1%} of messages; the rest are reachable "
                "by lexical search until embedding finishes"
            )
        if listing:
            notes.append("no words to search: the messages the filters keep, newest first")
        elif request.mode == "lexical" and not terms.known and not terms.unknown:
            raise SlackqueryError(
                "query has no searchable tokens for lexical search (letters or digits); "
                "for emoji or symbols, the semantic mode (mode='semantic', --mode semantic)"
            )
        # No filters (the common case): no per-request pass over every row at all.
        mask: np.ndarray | None = None
        positions: np.ndarray | None = None
        if not filters.is_empty():
            mask = artifact.mask(filters)
            if filters.phrases:
                mask &= phrase_mask(artifact, filters.phrases)
            for excluded in filters.excluded:
                mask &= ~containing(artifact, excluded)
            if visible is not None:
                mask &= visible.rows
        elif visible is not None:
            mask = visible.rows  # read-only, shared by this requester's queries
            positions = visible.vector_positions
        active = frozenset(
            arm.name
            for arm in self.arms
            if request.mode in arm.modes and arm.name not in fusion.disabled_arms
        )
        return QueryContext(
            text=text,
            mode=request.mode,
            route=NEWEST if listing else classify_route(text, parsed.phrases),
            fusion=fusion,
            artifact=artifact,
            filters=filters,
            mask=mask,
            mask_positions=positions,
            terms=terms,
            embedder=self.query_embedder,
            active_arms=active,
            max_query_parts=self.settings.search_max_query_parts,
            visible=visible,
            vector_coverage=coverage,
            notes=notes,
        )

    def search(
        self,
        request: SearchRequest,
        fusion: FusionConfig | None = None,
        deadline: Deadline | None = None,
        requester: Requester | None = None,
        max_chars: int | None = None,
    ) -> SearchResponse:
        """Run one search: validate -> context -> arms -> fuse -> stages -> page.

        `fusion` overrides the ranking knobs (evaluation grids); `deadline` (the MCP tools'
        per-call budget) is checked before each arm and each stage. `requester` narrows
        every step to what that Slack user may see (None: the operator, who sees
        everything). `max_chars` ends a page early whose hits' JSON would pass it."""
        deadline = deadline or Deadline(math.inf)
        started = time.perf_counter()
        if fusion is None:
            fusion, fusion_key = self._default_fusion, self._default_fusion_key
        else:
            fusion_key = _fusion_key(fusion)
        self._validate(request)
        parsed = parse_query(request.query)
        with SEARCHES.search(), self.artifact() as artifact:
            visible = artifact.visibility(requester)
            filters = self._filters(artifact, request, parsed, visible)
            request_fingerprint, offset = self._paging(
                artifact,
                {
                    "query": " ".join(request.query.split()),
                    "mode": request.mode,
                    "filters": filters.as_dict(),
                    "fusion": fusion_key,
                },
                requester,
                request.cursor,
            )
            ctx = self._context(artifact, request, parsed, filters, fusion, visible)
            if ctx.route == NEWEST:
                # One more than the page, so `_page` knows whether another follows.
                hits, weights = newest_messages(ctx, offset + request.limit + 1), {}
            else:
                hits, weights = self._ranked(ctx, request, fusion, deadline)
            ctx.timings["total"] = (time.perf_counter() - started) * 1000
            return self._page(ctx, request, hits, weights, offset, request_fingerprint, max_chars)

    def _ranked(
        self, ctx: QueryContext, request: SearchRequest, fusion: FusionConfig, deadline: Deadline
    ) -> tuple[list[FusedHit], dict[str, float]]:
        """The arms' rankings fused, then the stages: every hit, and the arms' weights."""
        rankings = self._run_arms(ctx, deadline)
        # The lexical arm's candidates are the messages holding a query word, and in
        # semantic mode the semantic arm's are all there is to page through.
        bounding = rankings.get("semantic" if request.mode == "semantic" else "lexical")
        ctx.window_filled = bounding is not None and bounding.rows.size >= ctx.window
        route_weights = fusion.weights(ctx.route, self.arms)
        weights = {name: route_weights[name] for name in sorted(rankings)}
        hits, over_cap = fuse(
            rankings,
            weights,
            rrf_k=fusion.rrf_k,
            thread_keys=ctx.artifact.thread_keys,
            max_per_thread=fusion.max_per_thread,
        )
        # Matches are what the lexical arm found; the semantic arm ranks every message.
        words = rankings.get("lexical")
        if words is not None:
            ctx.over_thread_cap = over_cap[np.isin(over_cap, words.rows)]
        for stage in self.stages:
            if request.mode in stage.modes:
                deadline.check(f"the {stage.name} stage")
                with ctx.timed(stage.name):
                    hits = stage.apply(ctx, hits)
        ctx.notes.extend(_by_meaning_only_note(ctx, words, hits))
        return hits, weights

    def _run_arms(self, ctx: QueryContext, deadline: Deadline) -> dict[str, ArmRanking]:
        """Every active arm's ranking, by arm name (arms with nothing to say are left out)."""
        rankings: dict[str, ArmRanking] = {}
        for arm in self.arms:
            if arm.name in ctx.active_arms:
                deadline.check(f"the {arm.name} arm")
                with ctx.timed(arm.name):
                    ranking = arm.rank(ctx)
                if ranking is not None:
                    rankings[arm.name] = ranking
        return rankings

    def _page(
        self,
        ctx: QueryContext,
        request: SearchRequest,
        hits: list[FusedHit],
        weights: dict[str, float],
        offset: int,
        request_fingerprint: str,
        max_chars: int | None,
    ) -> SearchResponse:
        """The requested page of `hits` (fewer where their JSON would pass `max_chars`),
        with a cursor for the next one."""
        if offset > len(hits):
            raise SlackqueryError(
                "cursor offset is out of range; repeat the search without a cursor"
            )
        artifact = ctx.artifact
        page = hits[offset : offset + request.limit]
        results = [self._hit(artifact.display_row(hit.row), hit) for hit in page]
        kept = fitting(results, max_chars)
        notes = list(ctx.notes)
        if kept < len(results):
            notes.append(cut_note(f"{kept} of this page's {len(results)} results", max_chars))
        next_offset = offset + kept
        notes.extend(self._over_thread_cap_note(ctx))
        if next_offset >= len(hits) and ctx.window_filled:
            handed = (
                f"semantic search hands its best {ctx.window} messages to ranking"
                if request.mode == "semantic"
                else f"lexical search hands its best {ctx.window} of the messages holding the "
                "query's words to ranking, and more may hold them"
            )
            notes.append(
                f"the ranking ends here: {handed}; narrow with filters (in:, from:, dates) "
                "to reach others"
            )
        return SearchResponse(
            query=ctx.text,
            mode=request.mode,
            route=ctx.route,
            weights=weights,
            filters=ctx.filters.as_dict(),
            artifact_id=artifact.build_id,
            generation_id=artifact.generation_id,
            results=results[:kept],
            offset=offset,
            next_cursor=self._next_cursor(
                artifact, request_fingerprint, next_offset, next_offset < len(hits)
            ),
            notes=notes,
            vector_coverage=ctx.vector_coverage,
            timings_ms={key: round(value, 3) for key, value in ctx.timings.items()},
        )

    def _over_thread_cap_note(self, ctx: QueryContext) -> list[str]:
        """Where the per-thread cap left matching messages out: their threads, so a reader
        knows the results are not all there is and where the rest are."""
        left_out = ctx.over_thread_cap
        if left_out is None or not left_out.size:
            return []
        threads = dict.fromkeys(
            str(ctx.artifact.display_row(row)["thread_id"]) for row in left_out.tolist()
        )
        named = ", ".join(list(threads)[:3]) + (", …" if len(threads) > 3 else "")
        return [
            f"{left_out.size} more message(s) holding the query's words are left out, as "
            f"results show at most {ctx.fusion.max_per_thread} a thread; they are in {named} "
            "(get_slack_thread reads a thread whole)"
        ]

    def _truncate(self, text: str | None) -> tuple[str, bool]:
        text = text or ""
        cap = self.settings.serve_max_text_chars
        if len(text) <= cap:
            return text, False
        rest = len(text) - cap
        return f"{text[:cap]}… [truncated: {rest} more characters]", True

    def _hit(self, row: Row, hit: FusedHit) -> SearchHitBase:
        text, truncated = self._truncate(row["text_display"])  # type: ignore[arg-type]
        signals = {
            arm.name: ArmSignal(
                rank=hit.ranks[arm.name], score=round(float(hit.scores[arm.name]), 6)
            )
            for arm in self.arms
            if arm.name in hit.ranks
        }
        return self._hit_model(
            **{name: row[name] for name in _RECORD_COLUMNS},
            timestamp=iso_timestamp(int(row["ts_us"])),  # type: ignore[arg-type]
            text=text,
            text_truncated=truncated,
            files=_attached_files(row),
            fused_score=round(hit.fused_score, 8),
            answer_cue=hit.answer_cue,
            **signals,
        )

    def _record(self, row: Row, is_target: bool = False) -> MessageRecord:
        text, truncated = self._truncate(row["text_display"])  # type: ignore[arg-type]
        return MessageRecord(
            **{name: row[name] for name in _RECORD_COLUMNS},
            timestamp=iso_timestamp(int(row["ts_us"])),  # type: ignore[arg-type]
            is_thread_parent=row["is_thread_parent"],
            is_thread_reply=row["is_thread_reply"],
            text=text,
            text_truncated=truncated,
            files=_attached_files(row),
            is_target=is_target,
        )  # type: ignore[arg-type]

    # -- lookups ----------------------------------------------------------------------
    def _document_id_from(
        self, artifact: LoadedArtifact, value: str, visible: Visibility | None = None
    ) -> str:
        value = value.strip()
        if not is_url(value):
            return value
        link = parse_permalink(value)
        for workspace_id, slug, *_ in artifact.workspaces:
            candidate = f"{workspace_id}:{link.channel_id}:{link.ts}"
            row = artifact.row_of.get(candidate)
            if (
                (slug or "").lower() == link.workspace_slug
                and row is not None
                and (visible is None or visible.rows[row])
            ):
                return candidate
        raise SlackqueryError(f"no message in the published artifact matches permalink {value}")

    def get_message(
        self,
        document_id: str,
        context_before: int = 0,
        context_after: int = 0,
        requester: Requester | None = None,
        max_chars: int | None = None,
    ) -> MessageResponse:
        """A message (by document id or permalink) and up to N earlier/M later neighbours,
        the farthest left out where the messages' JSON would pass `max_chars`.

        For a requester, a message they may not see does not exist (same error); its
        neighbours come from its own, visible, channel."""
        if context_before < 0 or context_after < 0:
            raise SlackqueryError("context_before and context_after must not be negative")
        if context_before + context_after > MAX_CONTEXT_MESSAGES:
            raise SlackqueryError(
                f"context_before + context_after must be at most {MAX_CONTEXT_MESSAGES}"
            )
        if len(document_id) > 2000:
            raise SlackqueryError("document_id is too long")
        with self.artifact() as artifact:
            visible = artifact.visibility(requester)
            doc = self._document_id_from(artifact, document_id, visible)
            if visible_message_row(artifact, doc, visible) is None:
                raise SlackqueryError(
                    f"no message with document_id {doc!r} in the published artifact "
                    "(ids look like W:C:ts; search_slack returns them)"
                )
            cursor = artifact.cursor()
            try:
                target = lookups.document(cursor, doc)
                assert target is not None  # the row exists in the artifact's memory view
                before, after = lookups.neighbours(cursor, target, context_before, context_after)
            finally:
                cursor.close()
            earlier = [self._record(item) for item in before]
            later = [self._record(item) for item in after]
            # Nearest first, alternately, so a cut leaves out the farthest on either side.
            nearest = [self._record(target, is_target=True)]
            for pair in itertools.zip_longest(reversed(earlier), later):
                nearest.extend(record for record in pair if record is not None)
            count = fitting(nearest, max_chars)
            notes = []
            if count < len(nearest):
                neighbours = f"{count - 1} of the {len(nearest) - 1} neighbours found"
                notes.append(cut_note(neighbours, max_chars, paged=False))
            kept = {id(record) for record in nearest[:count]}
            in_order = [*earlier, nearest[0], *later]
            messages = [record for record in in_order if id(record) in kept]
            return MessageResponse(messages=messages, artifact_id=artifact.build_id, notes=notes)

    def message_record(
        self, document_id: str, requester: Requester | None = None
    ) -> MessageRecord | None:
        """One message the requester may see, by document id, read from the artifact's
        memory without SQL (None when there is none): the answer path looks up the thread
        start of every reply it shows, and a query per reply doubled `ask`'s latency."""
        with self.artifact() as artifact:
            row = visible_message_row(artifact, document_id, artifact.visibility(requester))
            return None if row is None else self._record(artifact.display_row(row))

    def get_thread(
        self,
        thread_id: str,
        limit: int = 200,
        requester: Requester | None = None,
        cursor: str | None = None,
        max_chars: int | None = None,
    ) -> ThreadResponse:
        """A page of a thread's messages in time order; a message id of the thread also
        works, and `cursor` (a page's `next_cursor`) continues where that page ended. A page
        ends early where its messages' JSON would pass `max_chars`. A message with no
        replies is a thread of its own, with a note.

        For a requester, a thread of a channel they may not see does not exist."""
        if not 1 <= limit <= MAX_THREAD_LIMIT:
            raise SlackqueryError(f"limit must be between 1 and {MAX_THREAD_LIMIT}")
        if len(thread_id) > 2000:
            raise SlackqueryError("thread_id is too long")
        with self.artifact() as artifact:
            visible = artifact.visibility(requester)
            wanted, alone = self._thread_of(artifact, thread_id, visible)
            # The thread, not the id it was asked by, keys the cursor: a page reached from
            # a reply's id continues from its root's.
            thread_fingerprint, offset = self._paging(
                artifact, {"thread": wanted}, requester, cursor
            )
            # A message alone is one page: no cursor is ever made for it to continue from.
            rows = (
                [alone]
                if alone is not None
                else self._thread_rows(artifact, wanted, visible, limit + 1, offset)
            )
            if not rows:
                raise SlackqueryError(
                    "cursor offset is out of range; read the thread again without a cursor"
                    if offset
                    else f"no thread {thread_id!r} in the published artifact "
                    "(thread ids look like W:C:thread_ts; search hits carry them)"
                )
            messages = [self._record(row) for row in rows[:limit]]
            kept = fitting(messages, max_chars)
            more = len(rows) > kept
            return ThreadResponse(
                thread_id=wanted,
                messages=messages[:kept],
                offset=offset,
                truncated=more,
                next_cursor=self._next_cursor(artifact, thread_fingerprint, offset + kept, more),
                artifact_id=artifact.build_id,
                notes=[] if alone is None else [NO_REPLIES_NOTE],
            )

    def _paging(
        self,
        artifact: LoadedArtifact,
        listing: dict[str, object],
        requester: Requester | None,
        cursor: str | None,
    ) -> tuple[str, int]:
        """The key that binds a listing's cursors (a search's, a thread's, the scopes') to it
        and its requester, and the offset `cursor` continues from (0: the first page)."""
        requester_key = requester.key if requester is not None else None
        key = fingerprint({**listing, "requester": requester_key})
        return key, self.cursors.decode(cursor, artifact.build_id, key) if cursor else 0

    def _next_cursor(
        self, artifact: LoadedArtifact, key: str, offset: int, more: bool
    ) -> str | None:
        """The cursor of the page from `offset` of the listing `key` names, when `more`."""
        return self.cursors.encode(artifact.build_id, key, offset) if more else None

    def _thread_of(
        self, artifact: LoadedArtifact, thread_id: str, visible: Visibility | None
    ) -> tuple[str, Row | None]:
        """The thread id a thread id, message id or permalink names (as given when it names
        no message the requester may see), and the message itself when it has no replies:
        every hit carries a `thread_root_id`, which for such a message is its own id."""
        wanted = thread_id.strip()
        if wanted.lower().startswith(("http://", "https://")):
            wanted = self._document_id_from(artifact, wanted, visible)
        cursor = artifact.cursor()
        try:
            owner = lookups.document(cursor, wanted)
        finally:
            cursor.close()
        if owner is None or not _sees(visible, owner):
            return wanted, None
        if not owner["thread_id"]:
            return wanted, owner
        return str(owner["thread_id"]), None

    @staticmethod
    def _thread_rows(
        artifact: LoadedArtifact,
        thread_id: str,
        visible: Visibility | None,
        limit: int,
        offset: int,
    ) -> list[Row]:
        """`limit` of the thread's messages from the `offset`-th, those the requester sees."""
        # A thread outside the requester's channels is not read at all: reading its rows
        # to drop them would make it slower than one that never was.
        if visible is not None and channel_of(thread_id) not in visible.channels:
            return []
        cursor = artifact.cursor()
        try:
            rows = lookups.thread_messages(cursor, thread_id, limit, offset)
        finally:
            cursor.close()
        return [row for row in rows if _sees(visible, row)]

    def list_scopes(
        self,
        workspace_id: str | None = None,
        channel_name: str | None = None,
        limit: int = 200,
        requester: Requester | None = None,
        cursor: str | None = None,
        max_chars: int | None = None,
    ) -> ScopesResponse:
        """A page of channels with counts and time spans, optionally narrowed to a
        workspace/name; `cursor` (a page's `next_cursor`) continues where that page ended.
        A page ends early where its channels' JSON would pass `max_chars`.

        For a requester, only the channels they may see (invisible ones not even by name)."""
        if not 1 <= limit <= MAX_SCOPE_LIMIT:
            raise SlackqueryError(f"limit must be between 1 and {MAX_SCOPE_LIMIT}")
        # An empty name narrows to nothing; taken as "no filter" it would list everything.
        if workspace_id is not None and not workspace_id.strip():
            raise SlackqueryError("workspace_id must not be empty (leave it out for every one)")
        if channel_name is not None and not channel_name.strip().lstrip("#"):
            raise SlackqueryError("channel_name must not be empty (leave it out for every one)")
        with self.artifact() as artifact:
            visible = artifact.visibility(requester)
            workspaces = (
                set(artifact.resolve_workspaces([workspace_id], visible)) if workspace_id else None
            )
            # A name or an id, as search filters take them; unknown: raises with close matches.
            wanted = (
                set(artifact.resolve_channels([channel_name.strip()], visible))
                if channel_name
                else None
            )
            scopes: list[ScopeRecord] = []
            for workspace, channel, name, kind, count, first, last in artifact.channels:
                if visible is not None and (workspace, channel) not in visible.channels:
                    continue
                if workspaces is not None and workspace not in workspaces:
                    continue
                if wanted is not None and channel not in wanted:
                    continue
                slug, workspace_name = artifact.workspace_names.get(workspace, (None, None))
                scopes.append(
                    ScopeRecord(
                        workspace_id=workspace,
                        workspace_slug=slug,
                        workspace_name=workspace_name,
                        channel_id=channel,
                        channel_name=name,
                        conversation_type=kind,
                        message_count=int(count or 0),
                        first_ts_us=first,
                        last_ts_us=last,
                        first_timestamp=None if first is None else iso_timestamp(first),
                        last_timestamp=None if last is None else iso_timestamp(last),
                    )
                )
            scopes.sort(key=lambda s: (s.workspace_slug or "", s.channel_name or "", s.channel_id))
            listing, offset = self._paging(
                artifact, {"scopes": [workspace_id, channel_name]}, requester, cursor
            )
            if offset > len(scopes):
                raise SlackqueryError("cursor offset is out of range; list again without a cursor")
            page = scopes[offset : offset + limit]
            kept = fitting(page, max_chars)
            more = len(scopes) > offset + kept
            return ScopesResponse(
                scopes=page[:kept],
                offset=offset,
                truncated=more,
                next_cursor=self._next_cursor(artifact, listing, offset + kept, more),
                artifact_id=artifact.build_id,
            )


def fitting(records: Sequence[BaseModel], max_chars: int | None) -> int:
    """How many of `records`, from the first, fit in `max_chars` characters of JSON: at
    least one, so that every page moves on; all of them without a budget."""
    if max_chars is None:
        return len(records)
    used = 0
    for count, record in enumerate(records):
        used += len(record.model_dump_json()) + 1  # and the comma between records
        if used > max_chars and count:
            return count
    return len(records)


def cut_note(kept: str, max_chars: int | None, paged: bool = True) -> str:
    """The note of a response cut to its character budget."""
    rest = "; next_cursor reads on" if paged else "; ask for fewer"
    return (
        f"this response holds {kept}, to stay under {max_chars:,} characters "
        f"(SLACKQUERY_SERVE_MAX_RESPONSE_CHARS){rest}"
    )


def _by_meaning_only_note(
    ctx: QueryContext, words: ArmRanking | None, hits: list[FusedHit]
) -> list[str]:
    """A note where the lexical arm ran and found no message holding a query word, yet
    other arms ranked messages: an agent would take those semantic neighbours for matches."""
    if "lexical" not in ctx.active_arms or not hits or (words is not None and words.rows.size):
        return []
    holding = "no message" if ctx.filters.is_empty() else "no message the filters keep"
    return [f"{holding} holds any of the query's words: these results are related by meaning only"]


def visible_message_row(
    artifact: LoadedArtifact, document_id: str, visible: Visibility | None
) -> int | None:
    """The artifact row of a message the requester may see (None: operator), or None
    when there is no such message or they may not see it: the two look alike."""
    row = artifact.row_of.get(document_id)
    if row is None or not artifact.is_message[row]:
        return None
    if visible is not None and not visible.rows[row]:
        return None
    return row


def _sees(visible: Visibility | None, row: Row) -> bool:
    """Whether a looked-up row lies in a channel the requester may see (None: operator)."""
    return visible is None or (row["workspace_id"], row["channel_id"]) in visible.channels


def visible_frequency(artifact: LoadedArtifact, visible: Visibility, term_id: int) -> int:
    """How many rows the requester may see hold the term."""
    bm25 = artifact.bm25
    postings = bm25.posting_rows[bm25.offsets[term_id] : bm25.offsets[term_id + 1]]
    return visible.frequency(term_id, postings)


def visible_terms(
    artifact: LoadedArtifact,
    terms: QueryTerms,
    visible: Visibility,
    text: str,
    phrases: list[str] | tuple[str, ...],
) -> QueryTerms:
    """`terms` as if the index held only the visible rows: a token found only in messages
    the requester may not see is unknown, in the query's order, so the note "terms found
    in no message" reads the same as for a word nobody ever wrote; and each known term's
    idf is that of the visible rows, so scores do not reveal how many hidden messages use
    a word. Costs the postings of each term the first time this requester uses it."""
    bm25 = artifact.bm25
    frequencies = {
        token: visible_frequency(artifact, visible, bm25.term_ids[token]) for token in terms.known
    }
    known = [token for token in terms.known if frequencies[token]]
    hidden = set(terms.known) - set(known)
    unknown = set(terms.unknown) | hidden
    ordered = [token for token in dict.fromkeys(content_tokens(text, phrases)) if token in unknown]
    overall = bm25.idf[[bm25.term_ids[token] for token in known]]
    scoped = bm25.idf_of(
        np.array([frequencies[token] for token in known], dtype=np.float64),
        visible.document_count,
    )
    return QueryTerms(
        known=known,
        unknown=ordered if hidden else terms.unknown,
        dropped=terms.dropped,
        idf_scale=(scoped / np.maximum(overall, 1e-12)).tolist(),
    )


def newest_messages(ctx: QueryContext, count: int) -> list[FusedHit]:
    """The first `count` messages the search's mask keeps, newest first (ties by row), for
    a query of operators only; they carry no arm signals and a fused score of 0."""
    artifact = ctx.artifact
    assert ctx.mask is not None  # such a query has a filter, so a mask
    rows = np.flatnonzero(artifact.is_message & ctx.mask)
    newest = top_candidates(rows, artifact.ts_us[rows], count)
    return [FusedHit(row, 0.0, {}, {}) for row in newest.rows.tolist()]


def phrase_mask(artifact: LoadedArtifact, phrases: tuple[str, ...]) -> np.ndarray:
    """Rows whose lexical text contains every quoted phrase as consecutive tokens."""
    keep = np.ones(artifact.row_count, dtype=bool)
    for phrase in phrases:
        if fts_tokens(phrase):
            keep &= containing(artifact, phrase)
    return keep


def containing(artifact: LoadedArtifact, phrase: str) -> np.ndarray:
    """Rows whose lexical text contains the phrase's tokens consecutively (a word: itself)."""
    tokens = fts_tokens(phrase)
    candidates = artifact.bm25.rows_with_all(list(dict.fromkeys(tokens)))
    found = np.zeros(artifact.row_count, dtype=bool)
    if len(tokens) == 1:
        found[candidates] = True
    else:
        needle = " " + " ".join(tokens) + " "
        for row, text in artifact.texts(candidates.tolist()).items():
            if needle in " " + " ".join(fts_tokens(text)) + " ":
                found[row] = True
    return found
