"""The retrieval engine: lexical, semantic and hybrid search over the published artifact.

`SearchEngine` is the one production search path: the MCP tools, `slackquery search`, the
evaluation harness and the benchmark all call `search(request, fusion)`. It resolves the
`current.duckdb` pointer on every call and keeps one in-memory `LoadedArtifact` per
resolved file, so publishing a new artifact takes effect on the next request with no
restart, and requests already running on the old artifact finish on it (the old one is
closed once its last request ends).
"""

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from serving.artifact import CONVERSATION_TYPES, Filters, LoadedArtifact, fold_name
from serving.cursor import CursorCodec, fingerprint
from serving.fusion import (
    ANSWER_CUE_DEPTH,
    ArmRanking,
    FusionConfig,
    boost_answer_cues,
    fuse,
    top_candidates,
)
from serving.models import (
    ArmSignal,
    MessageRecord,
    MessageResponse,
    ScopeRecord,
    ScopesResponse,
    SearchHit,
    SearchRequest,
    SearchResponse,
    ThreadResponse,
)
from serving.query import (
    answer_types,
    classify_route,
    fts_tokens,
    has_searchable_content,
    holds_answer_type,
    parse_query,
    query_aspects,
)
from serving.semantic import QueryEmbedder, best_indices, vector_scores, vector_scores_many
from slackquery.embedding.base import Embedder
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings

MAX_FILTER_VALUE_CHARS = 200
# The parts of a multi-part question are ranked among the whole question's best matches by
# cosine, not over every vector: a part's answer is about the question too, and at 1M
# vectors one more pass for two parts costs ~165 ms (this pool: a few ms). Corpora with at
# most this many eligible vectors (Beacon, the sample workspace) rank parts over all.
ASPECT_POOL = 10_000
MAX_CONTEXT_MESSAGES = 100
MAX_THREAD_LIMIT = 500
MAX_SCOPE_LIMIT = 500
_PERMALINK_PATH = re.compile(r"^/archives/([A-Z0-9]+)/p(\d{7,})$")


def _default_embedder_factory(settings: Settings) -> Callable[[], Embedder]:
    def build() -> Embedder:
        from slackquery.embedding import build_embedder

        return build_embedder(settings)

    return build


def iso_timestamp(ts_us: int) -> str:
    """ISO 8601 UTC with microseconds, for citation."""
    return datetime.fromtimestamp(ts_us / 1_000_000, UTC).isoformat()


def _fusion_key(fusion: FusionConfig) -> str:
    """The ranking knobs as text for the cursor fingerprint (the default one is cached)."""
    return repr(sorted(asdict(fusion).items(), key=lambda item: item[0]))


class _Entry:
    def __init__(self, artifact: LoadedArtifact):
        self.artifact = artifact
        self.users = 0


class SearchEngine:
    """Search and lookups over whatever artifact `current.duckdb` names at call time."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        embedder_factory: Callable[[], Embedder] | None = None,
    ):
        self.settings = settings
        self.pointer = settings.artifact_path / "current.duckdb"
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
        """The artifact file `current.duckdb` points at now."""
        if not os.path.lexists(self.pointer):
            raise SlackqueryError(
                f"no published search artifact at {self.pointer}; "
                "run `slackquery build` then `slackquery publish`"
            )
        return Path(os.path.realpath(self.pointer))

    @contextmanager
    def artifact(self) -> Iterator[LoadedArtifact]:
        """The current artifact, held for the duration of one request."""
        path = self.resolve()
        entry = self._entry(path)
        try:
            yield entry.artifact
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
                    raise SlackqueryError(f"published artifact {path} is missing")
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
        """Readiness: the current artifact's identity (loading it if needed)."""
        with self.artifact() as artifact:
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

    def _filters(self, artifact: LoadedArtifact, request: SearchRequest, parsed) -> Filters:
        def merged(explicit: tuple[str, ...] | None, implied: tuple[str, ...] | None):
            if explicit is None:
                return implied
            if implied is None:
                return explicit
            return tuple(sorted(set(explicit) & set(implied)))

        channels = merged(
            artifact.resolve_channels(request.channel_ids) if request.channel_ids else None,
            artifact.resolve_channels(parsed.channel_names) if parsed.channel_names else None,
        )
        authors = merged(
            artifact.resolve_authors(request.author_ids) if request.author_ids else None,
            artifact.resolve_authors(parsed.user_names) if parsed.user_names else None,
        )
        starts = [v for v in (request.start_ts_us, parsed.start_ts_us) if v is not None]
        ends = [v for v in (request.end_ts_us, parsed.end_ts_us) if v is not None]
        return Filters(
            workspace_ids=(
                artifact.resolve_workspaces(request.workspace_ids)
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
            phrases=tuple(parsed.phrases),
        )

    def _phrase_mask(self, artifact: LoadedArtifact, phrases: tuple[str, ...]) -> np.ndarray:
        """Rows whose lexical text contains every quoted phrase as consecutive tokens."""
        keep = np.ones(artifact.row_count, dtype=bool)
        for phrase in phrases:
            tokens = fts_tokens(phrase)
            if not tokens:
                continue
            candidates = artifact.bm25.rows_with_all(list(dict.fromkeys(tokens)))
            found = np.zeros(artifact.row_count, dtype=bool)
            if len(tokens) == 1:
                found[candidates] = True
            else:
                needle = " " + " ".join(tokens) + " "
                for row, text in artifact.texts(candidates.tolist()).items():
                    if needle in " " + " ".join(fts_tokens(text)) + " ":
                        found[row] = True
            keep &= found
        return keep

    def _context_arm(
        self,
        artifact: LoadedArtifact,
        threads: ArmRanking,
        mask: np.ndarray | None,
        target: str,
        query_vector: np.ndarray | None,
    ) -> ArmRanking:
        """Turn ranked thread-context hits into a ranking of messages.

        `root`: each thread votes for its first passing message (the root). `thread`: every
        passing message of the thread shares the thread's rank. `best`: the thread votes for
        its passing message most similar to the query (cosine; root when no vector).
        Cost: the members of at most `candidate_window` threads, never the corpus.
        """
        groups: list[tuple[int, float, np.ndarray]] = []
        for rank, (thread_row, score) in enumerate(
            zip(threads.rows.tolist(), threads.scores.tolist(), strict=True), start=1
        ):
            members = artifact.context_members.get(thread_row)
            if members is None or members.size == 0:
                continue
            passing = artifact.is_message[members]
            if mask is not None:
                passing &= mask[members]
            if passing.any():
                groups.append((rank, score, members[passing]))
        cosines: np.ndarray | None = None
        if target == "best" and query_vector is not None and groups:
            # One matrix product for every member of every thread; members without a
            # vector score -inf, so a thread without any vectors falls back to its root.
            everything = np.concatenate([members for _, _, members in groups])
            cosines = np.full(everything.size, -np.inf, dtype=np.float32)
            has_vector = artifact.has_vector[everything]
            if has_vector.any():
                positions = np.searchsorted(artifact.vector_rows, everything[has_vector])
                cosines[has_vector] = artifact.vectors[positions] @ query_vector
        mapped_rows: list[int] = []
        mapped_ranks: list[int] = []
        mapped_scores: list[float] = []
        seen: set[int] = set()
        offset = 0
        for rank, score, members in groups:
            if target == "thread":
                chosen = members.tolist()
            elif cosines is not None:
                chosen = [int(members[int(np.argmax(cosines[offset : offset + members.size]))])]
            else:
                chosen = [int(members[0])]
            offset += members.size
            for row in chosen:
                if row not in seen:
                    seen.add(row)
                    mapped_rows.append(row)
                    mapped_ranks.append(rank)
                    mapped_scores.append(score)
        return ArmRanking(
            np.array(mapped_rows, dtype=np.int64),
            np.array(mapped_scores, np.float32),
            np.array(mapped_ranks, dtype=np.int64),
        )

    def _aspect_arm(
        self,
        artifact: LoadedArtifact,
        part_vectors: np.ndarray,
        positions: np.ndarray | None,
        rows: np.ndarray,
        window: int,
    ) -> ArmRanking:
        """Rank messages (`rows`, at matrix `positions`) by cosine with each part of a
        multi-part question, then interleave the parts: a message's rank is its best rank in
        any part's list, so each part's top hits compete near the top, not only the part the
        whole question's vector leans to. One pass over those vectors for all parts."""
        best: dict[int, tuple[int, float]] = {}
        for scores in vector_scores_many(
            artifact.vectors, part_vectors, positions, artifact.vector_codes
        ):
            ranking = top_candidates(rows, scores, window)
            for rank, (row, score) in enumerate(
                zip(ranking.rows.tolist(), ranking.scores.tolist(), strict=True), start=1
            ):
                if row not in best or rank < best[row][0]:
                    best[row] = (rank, score)
        ordered = sorted(best.items(), key=lambda item: (item[1][0], -item[1][1], item[0]))
        return ArmRanking(
            np.array([row for row, _ in ordered], dtype=np.int64),
            np.array([score for _, (_, score) in ordered], dtype=np.float32),
            np.array([rank for _, (rank, _) in ordered], dtype=np.int64),
        )

    def search(self, request: SearchRequest, fusion: FusionConfig | None = None) -> SearchResponse:
        """Run one search; `fusion` overrides the ranking knobs (evaluation grids)."""
        started = time.perf_counter()
        if fusion is None:
            fusion, fusion_key = self._default_fusion, self._default_fusion_key
        else:
            fusion_key = _fusion_key(fusion)
        self._validate(request)
        parsed = parse_query(request.query)
        with self.artifact() as artifact:
            filters = self._filters(artifact, request, parsed)
            request_fingerprint = fingerprint(
                {
                    "query": " ".join(request.query.split()),
                    "mode": request.mode,
                    "filters": filters.as_dict(),
                    "fusion": fusion_key,
                }
            )
            offset = 0
            if request.cursor:
                offset = self.cursors.decode(request.cursor, artifact.build_id, request_fingerprint)
            notes: list[str] = []
            text = parsed.text
            if not has_searchable_content(text):
                raise SlackqueryError(
                    "query has no searchable text (letters, digits or emoji) besides operators"
                )
            terms = artifact.bm25.query_terms(
                text, self.settings.search_max_query_tokens, parsed.phrases
            )
            if terms.dropped:
                notes.append(
                    f"only the first {self.settings.search_max_query_tokens} distinct query "
                    f"tokens were used ({terms.dropped} dropped)"
                )
            if terms.unknown:
                notes.append("terms found in no message: " + ", ".join(terms.unknown[:10]))
            if request.mode == "lexical" and not terms.known and not terms.unknown:
                raise SlackqueryError(
                    "query has no searchable tokens for lexical search (letters or digits); "
                    "try mode='semantic' for emoji or symbols"
                )
            route = classify_route(text, parsed.phrases)
            weights = fusion.weights(route)
            # No filters (the common case): no per-request pass over every row at all.
            mask: np.ndarray | None = None
            if not filters.is_empty():
                mask = artifact.mask(filters)
                if filters.phrases:
                    mask &= self._phrase_mask(artifact, filters.phrases)
            window = fusion.candidate_window
            arms: dict[str, ArmRanking] = {}
            timings: dict[str, float] = {}
            query_vector: np.ndarray | None = None
            if request.mode in ("lexical", "hybrid") and terms.known:
                tick = time.perf_counter()
                eligible = artifact.is_message if mask is None else artifact.is_message & mask
                rows, scores = artifact.bm25.candidates(terms.known, window, eligible)
                arms["lexical"] = top_candidates(rows, scores, window)
                timings["lexical"] = (time.perf_counter() - tick) * 1000
            if request.mode in ("semantic", "hybrid"):
                aspects = (
                    query_aspects(text)
                    if request.mode == "hybrid" and fusion.use_aspect_arm
                    else []
                )
                tick = time.perf_counter()
                # The question and its parts in one call: the model batches them.
                query_vector, *part_vectors = self.query_embedder.embed_many(
                    [text, *aspects], artifact.generation_id, artifact.dimension
                )
                timings["embed"] = (time.perf_counter() - tick) * 1000
                tick = time.perf_counter()
                if mask is None:
                    positions = artifact.searchable_vectors
                else:
                    vector_rows = artifact.vector_rows
                    positions = np.flatnonzero(mask[vector_rows] & artifact.is_message[vector_rows])
                semantic_scores = vector_scores(
                    artifact.vectors, query_vector, positions, artifact.vector_codes
                )
                semantic_rows = (
                    artifact.vector_rows if positions is None else artifact.vector_rows[positions]
                )
                arms["semantic"] = top_candidates(semantic_rows, semantic_scores, window)
                timings["semantic"] = (time.perf_counter() - tick) * 1000
                if aspects:
                    tick = time.perf_counter()
                    pool = best_indices(semantic_scores, ASPECT_POOL)
                    if pool is None:
                        part_positions, part_rows = positions, semantic_rows
                    else:
                        part_positions = pool if positions is None else positions[pool]
                        part_rows = semantic_rows[pool]
                    arms["aspects"] = self._aspect_arm(
                        artifact, np.stack(part_vectors), part_positions, part_rows, window
                    )
                    timings["aspects"] = (time.perf_counter() - tick) * 1000
                    notes.append("searched each part: " + " | ".join(aspects))
                named = (
                    artifact.authors_named_in(text)
                    if request.mode == "hybrid" and fusion.use_author_arm and not filters.author_ids
                    else None
                )
                if named is not None and named.size:
                    # A hint, not a filter: the named people's messages by cosine.
                    by_named = np.isin(artifact.author_codes[semantic_rows], named)
                    arms["authors"] = top_candidates(
                        semantic_rows[by_named], semantic_scores[by_named], window
                    )
            if request.mode == "hybrid" and fusion.use_context_arm and terms.known:
                tick = time.perf_counter()
                eligible = artifact.is_context if mask is None else artifact.is_context & mask
                rows, scores = artifact.bm25.candidates(terms.known, window, eligible)
                threads = top_candidates(rows, scores, window)
                arms["context"] = self._context_arm(
                    artifact, threads, mask, fusion.context_target, query_vector
                )
                timings["context"] = (time.perf_counter() - tick) * 1000
            used_weights = {arm: weights[arm] for arm in sorted(arms)}
            hits = fuse(
                arms,
                used_weights,
                rrf_k=fusion.rrf_k,
                thread_keys=artifact.thread_keys,
                max_per_thread=fusion.max_per_thread,
            )
            kinds = answer_types(text) if request.mode == "hybrid" else ()
            if kinds and fusion.answer_cue_boost:
                tick = time.perf_counter()
                cued = [
                    holds_answer_type(str(artifact.display_row(hit.row)["text_display"]), kinds)
                    for hit in hits[:ANSWER_CUE_DEPTH]
                ]
                hits = boost_answer_cues(hits, cued, fusion.answer_cue_boost)
                timings["answer_cues"] = (time.perf_counter() - tick) * 1000
                notes.append("ranked up messages that state a " + " / ".join(kinds))
            if offset > len(hits):
                raise SlackqueryError(
                    "cursor offset is out of range; repeat the search without a cursor"
                )
            page = hits[offset : offset + request.limit]
            results = [self._hit(artifact.display_row(hit.row), hit) for hit in page]
            next_offset = offset + len(page)
            next_cursor = (
                self.cursors.encode(artifact.build_id, request_fingerprint, next_offset)
                if next_offset < len(hits)
                else None
            )
            timings["total"] = (time.perf_counter() - started) * 1000
            return SearchResponse(
                query=text,
                mode=request.mode,
                route=route,
                weights=used_weights,
                filters=filters.as_dict(),
                artifact_id=artifact.build_id,
                generation_id=artifact.generation_id,
                results=results,
                next_cursor=next_cursor,
                notes=notes,
                timings_ms={key: round(value, 3) for key, value in timings.items()},
            )

    def _truncate(self, text: str | None) -> tuple[str, bool]:
        text = text or ""
        cap = self.settings.serve_max_text_chars
        if len(text) <= cap:
            return text, False
        rest = len(text) - cap
        return f"{text[:cap]}… [truncated: {rest} more characters]", True

    def _hit(self, row: dict[str, object], hit) -> SearchHit:
        text, truncated = self._truncate(row["text_display"])  # type: ignore[arg-type]

        def signal(arm: str) -> ArmSignal | None:
            if arm not in hit.ranks:
                return None
            return ArmSignal(rank=hit.ranks[arm], score=round(float(hit.scores[arm]), 6))

        return SearchHit(
            document_id=row["document_id"],
            source_message_id=row["source_message_id"],
            workspace_id=row["workspace_id"],
            workspace_name=row["workspace_name"],
            channel_id=row["channel_id"],
            channel_name=row["channel_name"],
            conversation_type=row["conversation_type"],
            author_id=row["author_id"],
            author_name=row["author_name"],
            ts_us=row["ts_us"],
            timestamp=iso_timestamp(int(row["ts_us"])),  # type: ignore[arg-type]
            thread_id=row["thread_id"],
            thread_root_id=row["thread_root_id"],
            text=text,
            text_truncated=truncated,
            permalink=row["permalink"],
            lexical=signal("lexical"),
            semantic=signal("semantic"),
            context=signal("context"),
            aspects=signal("aspects"),
            authors=signal("authors"),
            fused_score=round(hit.fused_score, 8),
            answer_cue=hit.answer_cue,
        )  # type: ignore[arg-type]

    def _record(self, row: tuple, is_target: bool = False) -> MessageRecord:
        (
            document_id,
            source_message_id,
            workspace_id,
            workspace_name,
            _slug,
            channel_id,
            channel_name,
            _type,
            author_id,
            author_name,
            _ts,
            ts_us,
            thread_id,
            thread_root_id,
            is_parent,
            is_reply,
            text_display,
            permalink,
        ) = row
        text, truncated = self._truncate(text_display)
        return MessageRecord(
            document_id=document_id,
            source_message_id=source_message_id,
            workspace_id=workspace_id,
            workspace_name=workspace_name,
            channel_id=channel_id,
            channel_name=channel_name,
            author_id=author_id,
            author_name=author_name,
            ts_us=ts_us,
            timestamp=iso_timestamp(ts_us),
            thread_id=thread_id,
            thread_root_id=thread_root_id,
            is_thread_parent=is_parent,
            is_thread_reply=is_reply,
            text=text,
            text_truncated=truncated,
            permalink=permalink,
            is_target=is_target,
        )

    # -- lookups ----------------------------------------------------------------------
    def _document_id_from(self, artifact: LoadedArtifact, value: str) -> str:
        value = value.strip()
        if not value.lower().startswith(("http://", "https://")):
            return value
        parsed = urlparse(value)
        host = (parsed.hostname or "").lower()
        match = _PERMALINK_PATH.match(parsed.path)
        if not host.endswith(".slack.com") or match is None:
            raise SlackqueryError(
                "not a Slack message permalink; expected "
                "https://<workspace>.slack.com/archives/<channel>/p<digits>"
            )
        slug = host.removesuffix(".slack.com")
        channel_id, digits = match.groups()
        ts = f"{digits[:-6]}.{digits[-6:]}"
        workspaces = [row[0] for row in artifact.workspaces if (row[1] or "").lower() == slug]
        for workspace_id in workspaces:
            candidate = f"{workspace_id}:{channel_id}:{ts}"
            if candidate in artifact.row_of:
                return candidate
        raise SlackqueryError(f"no message in the published artifact matches permalink {value}")

    def _select(self) -> str:
        from serving.artifact import DISPLAY_COLUMNS

        return f"select {', '.join(DISPLAY_COLUMNS)} from search_documents"

    def get_message(
        self, document_id: str, context_before: int = 0, context_after: int = 0
    ) -> MessageResponse:
        """A message (by document id or permalink) and up to N earlier/M later neighbours."""
        if context_before < 0 or context_after < 0:
            raise SlackqueryError("context_before and context_after must not be negative")
        if context_before + context_after > MAX_CONTEXT_MESSAGES:
            raise SlackqueryError(
                f"context_before + context_after must be at most {MAX_CONTEXT_MESSAGES}"
            )
        if len(document_id) > 2000:
            raise SlackqueryError("document_id is too long")
        with self.artifact() as artifact:
            doc = self._document_id_from(artifact, document_id)
            row = artifact.row_of.get(doc)
            if row is None or not artifact.is_message[row]:
                raise SlackqueryError(
                    f"no message with document_id {doc!r} in the published artifact "
                    "(ids look like W:C:ts; search_slack returns them)"
                )
            cursor = artifact.cursor()
            try:
                target = cursor.execute(
                    self._select() + " where document_id = $id", {"id": doc}
                ).fetchone()
                key = {"w": target[2], "c": target[5], "ts": target[11], "id": doc}
                same_channel = (
                    " where document_kind = 'message' and workspace_id = $w and channel_id = $c"
                )
                before = cursor.execute(
                    self._select()
                    + same_channel
                    + " and (ts_us < $ts or (ts_us = $ts and document_id < $id))"
                    " order by ts_us desc, document_id desc limit $n",
                    {**key, "n": context_before},
                ).fetchall()
                after = cursor.execute(
                    self._select()
                    + same_channel
                    + " and (ts_us > $ts or (ts_us = $ts and document_id > $id))"
                    " order by ts_us, document_id limit $n",
                    {**key, "n": context_after},
                ).fetchall()
            finally:
                cursor.close()
            messages = [self._record(item) for item in reversed(before)]
            messages.append(self._record(target, is_target=True))
            messages.extend(self._record(item) for item in after)
            return MessageResponse(messages=messages, artifact_id=artifact.build_id)

    def get_thread(self, thread_id: str, limit: int = 200) -> ThreadResponse:
        """A thread's messages in time order; a message id of the thread also works."""
        if not 1 <= limit <= MAX_THREAD_LIMIT:
            raise SlackqueryError(f"limit must be between 1 and {MAX_THREAD_LIMIT}")
        if len(thread_id) > 2000:
            raise SlackqueryError("thread_id is too long")
        with self.artifact() as artifact:
            cursor = artifact.cursor()
            try:
                wanted = thread_id.strip()
                if wanted.lower().startswith(("http://", "https://")):
                    wanted = self._document_id_from(artifact, wanted)
                owner = cursor.execute(
                    "select thread_id from search_documents where document_id = $id",
                    {"id": wanted},
                ).fetchone()
                if owner is not None and owner[0]:
                    wanted = owner[0]
                rows = cursor.execute(
                    self._select() + " where document_kind = 'message' and thread_id = $t"
                    " order by ts_us, document_id limit $n",
                    {"t": wanted, "n": limit + 1},
                ).fetchall()
            finally:
                cursor.close()
            if not rows:
                raise SlackqueryError(
                    f"no thread {thread_id!r} in the published artifact "
                    "(thread ids look like W:C:thread_ts; search hits carry them)"
                )
            return ThreadResponse(
                thread_id=wanted,
                messages=[self._record(row) for row in rows[:limit]],
                truncated=len(rows) > limit,
                artifact_id=artifact.build_id,
            )

    def list_scopes(
        self, workspace_id: str | None = None, channel_name: str | None = None, limit: int = 200
    ) -> ScopesResponse:
        """Channels with counts and time spans, optionally narrowed to a workspace/name."""
        if not 1 <= limit <= MAX_SCOPE_LIMIT:
            raise SlackqueryError(f"limit must be between 1 and {MAX_SCOPE_LIMIT}")
        with self.artifact() as artifact:
            workspaces = set(artifact.resolve_workspaces([workspace_id])) if workspace_id else None
            wanted_name = fold_name(channel_name.strip().lstrip("#")) if channel_name else None
            if wanted_name is not None and wanted_name not in artifact.channel_by_name:
                artifact.resolve_channels([wanted_name])  # raises with close matches
            scopes: list[ScopeRecord] = []
            for workspace, channel, name, kind, count, first, last in artifact.channels:
                if workspaces is not None and workspace not in workspaces:
                    continue
                if wanted_name is not None and fold_name(name or "") != wanted_name:
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
                    )
                )
            scopes.sort(key=lambda s: (s.workspace_slug or "", s.channel_name or "", s.channel_id))
            return ScopesResponse(
                scopes=scopes[:limit], truncated=len(scopes) > limit, artifact_id=artifact.build_id
            )


def with_window(fusion: FusionConfig | None, window: int) -> FusionConfig:
    """A copy of `fusion` (or the defaults) with another candidate window."""
    return replace(fusion or FusionConfig(), candidate_window=window)
