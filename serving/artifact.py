"""One published artifact, opened read-only, its arrays mapped once.

An artifact never changes after publish, so everything a query needs on its hot path was
written by the build beside the file as arrays (slackquery/artifacts/arrays.py), and a
load maps them read-only instead of reading DuckDB: filter columns as integer codes, BM25
postings, thread structure, the display columns of every row (so a result page costs no
DuckDB round trip) and the vector matrices. A load copies nothing, and every process
shares the page cache. Only the small name tables that turn `#eng` / `@priya` into ids
are read. DuckDB stays the place for neighbour/thread lookups and phrase verification,
always with bound parameters. Rows are `search_documents` in `document_id` order, so a
row index doubles as the stable document-id tie-break.
"""

import difflib
import json
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import duckdb
import numpy as np

from serving.access import (
    Requester,
    Visibility,
    account_limits,
    compute_visibility,
    rows_with_codes,
)
from serving.lexical import BM25Index
from serving.query import STOPWORDS, fts_tokens, normalize
from serving.semantic import Int8Scan
from serving.time_runs import TimeRuns
from slackquery.artifacts import arrays, files, schema, validate
from slackquery.artifacts.documents import DocumentArrays
from slackquery.artifacts.packed import SortedKeys
from slackquery.artifacts.schema import CONVERSATION_TYPES as CONVERSATION_TYPES
from slackquery.duckdb_setup import DamagedDatabase, damage_of, open_database
from slackquery.errors import SlackqueryError

EXPECTED_FTS_CONFIG = {
    "stemmer": "none",
    "stopwords": "none",
    "lower": 1,
    "strip_accents": 1,
    "ignore": r"[^\p{L}\p{N}]+",
}
# `#build-help` written in a question (Slack's own channel mention is `<#C123|name>`).
_CHANNEL_MENTION = re.compile(r"(?<![\w#])#([\w-]+)")
# The artifact's DuckDB only answers small lookups (texts, threads, names); capping its
# cache keeps resident memory to the mapped pages queries touch.
SERVING_DUCKDB_MEMORY_LIMIT = "1GiB"


@dataclass(frozen=True)
class Filters:
    """Resolved filters: sets of ids plus an inclusive time range; None means no filter."""

    workspace_ids: tuple[str, ...] | None = None
    channel_ids: tuple[str, ...] | None = None
    author_ids: tuple[str, ...] | None = None
    conversation_types: tuple[str, ...] | None = None
    start_ts_us: int | None = None
    end_ts_us: int | None = None
    is_thread: bool = False
    has_link: bool = False
    phrases: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()  # words or phrases whose messages are left out

    def is_empty(self) -> bool:
        """True when no filter narrows the rows (the search path then skips the mask)."""
        return (
            self.workspace_ids is None
            and self.channel_ids is None
            and self.author_ids is None
            and self.conversation_types is None
            and self.start_ts_us is None
            and self.end_ts_us is None
            and not self.is_thread
            and not self.has_link
            and not self.phrases
            and not self.excluded
        )

    def as_dict(self) -> dict[str, object]:
        """Plain data for fingerprints and responses."""
        return {
            "workspace_ids": list(self.workspace_ids) if self.workspace_ids is not None else None,
            "channel_ids": list(self.channel_ids) if self.channel_ids is not None else None,
            "author_ids": list(self.author_ids) if self.author_ids is not None else None,
            "conversation_types": (
                list(self.conversation_types) if self.conversation_types is not None else None
            ),
            "start_ts_us": self.start_ts_us,
            "end_ts_us": self.end_ts_us,
            "is_thread": self.is_thread,
            "has_link": self.has_link,
            "phrases": list(self.phrases),
            "excluded": list(self.excluded),
        }


def fold_name(name: object) -> str:
    """A name as lookups compare it: accents stripped, case folded (`Chloé` == `chloe`)."""
    return normalize(str(name)).casefold()


def _close_matches(value: str, choices: Iterable[str]) -> str:
    """Up to five names spelled like `value`, then names holding it (`data` for
    `data-platform`, which is too long to be spelled like it)."""
    folded, names = fold_name(value), sorted(set(choices))
    similar = difflib.get_close_matches(folded, names, n=5, cutoff=0.5)
    holding = [name for name in names if folded and folded in name]
    matches = list(dict.fromkeys(similar + holding))[:5]
    # Quoted: a group DM's name is its members', `jose, zoe`, commas included.
    quoted = ", ".join(f'"{match}"' for match in matches)
    return f"; close matches: {quoted}" if matches else ""


def _resolve_names(
    values: Sequence[str],
    sigil: str,
    known_ids: set[str],
    ids_by_name: dict[str, set[str]],
    kind: str,
    hint: str,
) -> tuple[str, ...]:
    """Ids, Slack mentions (`<#C1|eng>`, `<@U1>`) or `sigil`-prefixed names -> sorted ids.

    Names fold case and accents; an unknown one is an error listing close matches. An id
    after the sigil (`#G0123ABCD`, as message text shows a private channel) is that id
    when no name is written so.
    """
    resolved: set[str] = set()
    for value in values:
        text = value.strip()
        if text.startswith("<" + sigil) and text.endswith(">"):
            text = text[2:-1].split("|", 1)[0]
        if text in known_ids and not text.startswith(sigil):
            resolved.add(text)
            continue
        name = text.lstrip(sigil)
        found = ids_by_name.get(fold_name(name)) or ({name} if name in known_ids else None)
        if not found:
            raise SlackqueryError(
                f"unknown {kind} {value!r}{_close_matches(name, ids_by_name)}{hint}"
            )
        resolved |= found
    return tuple(sorted(resolved))


# How to move off a published artifact whose files are damaged or gone: a sealed artifact is
# never repaired in place, another build is published instead.
MOVE_OFF_DAMAGED = (
    "roll back (`slackquery rollback <build id>`, see `slackquery artifacts`) "
    "or build and publish a new one"
)


class ArtifactUnavailable(SlackqueryError):
    """Nothing can be served from the published artifact: none is published, or its file is
    missing, unreadable, damaged or of another schema. The message is the operator's (it
    names files and commands); requesters read `serving.faults.public_reason` instead."""


class DamagedArtifact(ArtifactUnavailable):
    """The published artifact's files are damaged: nothing more is served from it, and the
    server is not ready, until a publish moves off it."""


def damaged_artifact(path: Path, detail: object) -> DamagedArtifact:
    """The one-line error for a published artifact whose file is damaged; it names the
    file, not the folder it is in."""
    return DamagedArtifact(
        f"published artifact {path.name} is damaged ({detail}); {MOVE_OFF_DAMAGED}"
    )


# What reading damaged bytes raises where a sealed artifact's never do: a display record
# or packed string that does not decode (ValueError, UnicodeDecodeError among them), a
# record header past the end of its array (struct.error), offsets or codes that point past
# an array or a key that is not there (IndexError, KeyError), a number beyond any date
# (OverflowError), a DuckDB block that fails its checksum or cannot be read
# (duckdb.IOException). Bugs raise most of them too, so the seal decides (`check_damage`).
READ_ERRORS = (ValueError, LookupError, struct.error, OverflowError, duckdb.IOException)


def _load_failure(path: Path, error: BaseException) -> BaseException:
    """What loading an artifact that raised `error` raises: its damage, or its being
    unavailable (a schema, metadata or arrays it cannot serve from); anything else is a bug
    and stays itself."""
    if isinstance(error, duckdb.Error):
        # A damaged block shows when a query first reads it, not on open.
        damage = damage_of(error)
        if damage is not None:
            return damaged_artifact(path, damage)
        return ArtifactUnavailable(f"cannot read search artifact {path}: {error}")
    if isinstance(error, SlackqueryError) and not isinstance(error, ArtifactUnavailable):
        return ArtifactUnavailable(str(error))
    return error


# Requesters whose visibility an artifact keeps: each costs a flag per row and a position
# per visible vector (~9 MB at 1M rows), and computing one again 16-30 ms; without a bound a
# long-lived server would keep one for every requester it ever served.
VISIBILITIES_KEPT = 32


class LoadedArtifact:
    """The in-memory view of one artifact file; safe to share between threads."""

    def __init__(self, path: Path):
        self.path = path
        # No FTS extension: lexical search reads the artifact's postings arrays, and loading
        # it would cost every cold CLI search ~0.03 s.
        try:
            self._connection = open_database(str(path), read_only=True, what="search artifact")
        except DamagedDatabase as error:
            raise damaged_artifact(path, error.detail) from error
        except SlackqueryError as error:
            raise ArtifactUnavailable(str(error)) from error
        except duckdb.Error as error:
            raise ArtifactUnavailable(f"cannot read search artifact {path}: {error}") from error
        self._lock = threading.Lock()
        self._visibility: OrderedDict[str, Visibility] = OrderedDict()
        # Why its files no longer match the seal, once a request's error led to a check.
        self.damage: str | None = None
        self._seal_checked = False
        self._damage_lock = threading.Lock()
        try:
            self._load()
        except BaseException as error:
            self._connection.close()
            failure = _load_failure(path, error)
            if failure is error:
                raise
            raise failure from error

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection for one request (DuckDB connections are not shared across threads)."""
        with self._lock:
            return self._connection.cursor()

    def close(self) -> None:
        """Release the file handle; called once no request uses this artifact any more."""
        self._connection.close()

    # -- damage ----------------------------------------------------------------------
    def refuse_if_damaged(self) -> None:
        """Raise `DamagedArtifact` once a request has found this artifact damaged."""
        if self.damage is not None:
            raise damaged_artifact(self.path, self.damage)

    def check_damage(self, error: Exception) -> None:
        """Raise `DamagedArtifact` from `error` (one of `READ_ERRORS`, raised by a request on
        this artifact) when its files are damaged; return when they are sound: a bug.

        DuckDB checksums its blocks, so its damage error is proof. Anything else is checked
        against the seal (`verify_sealed`, ~1 s per GiB), once per loaded artifact: a sound
        verdict stands, so a bug a requester can trigger at will costs one check, not one
        per request (damage that comes later is found by `reconcile`, which checks the seal
        on every run, and publishes a sound artifact in its place)."""
        with self._damage_lock:
            if self.damage is None:
                self.damage = damage_of(error) or self._broken_seal()
        if self.damage is not None:
            raise damaged_artifact(self.path, self.damage) from error

    def _broken_seal(self) -> str | None:
        """How the files differ from the seal; None when they match or were checked once."""
        if self._seal_checked:
            return None
        self._seal_checked = True
        return validate.seal_damage(self.path.parent, self.build_id, self.path)

    # -- loading ---------------------------------------------------------------------
    def _load(self) -> None:
        connection = self._connection
        metadata = connection.execute("select * from artifact_metadata").fetchall()
        names = [column[0] for column in connection.description or ()]
        if len(metadata) != 1:
            raise SlackqueryError(f"artifact {self.path} has no single artifact_metadata row")
        self.metadata = dict(zip(names, metadata[0], strict=True))
        self.build_id = str(self.metadata["build_id"])
        self.generation_id = str(self.metadata["generation_id"])
        if self.metadata["schema_version"] != schema.SCHEMA_VERSION:
            raise SlackqueryError(
                f"artifact {self.build_id} has schema version {self.metadata['schema_version']}; "
                f"serving reads version {schema.SCHEMA_VERSION}: build and publish a new one"
            )
        fts_config = json.loads(self.metadata["fts_config_json"])
        for key, expected in EXPECTED_FTS_CONFIG.items():
            if str(fts_config.get(key)) != str(expected):
                raise SlackqueryError(
                    f"artifact {self.build_id} FTS config has {key}={fts_config.get(key)!r}; "
                    f"serving tokenises queries for {key}={expected!r}"
                )
        mapped = arrays.open_arrays(files.arrays_dir_of(self.path))
        self._load_documents(mapped.documents)
        self.bm25 = BM25Index(mapped.postings, self.row_count)
        connection.execute(f"set memory_limit = '{SERVING_DUCKDB_MEMORY_LIMIT}'")
        self._load_vectors(mapped.vectors)
        self._load_names()

    def _load_documents(self, documents: DocumentArrays) -> None:
        self.document_ids = documents.document_ids
        self.row_count = len(self.document_ids)
        if self.row_count != self.metadata["document_count"]:
            raise SlackqueryError(f"artifact {self.build_id} has arrays of another build")
        # Document id -> row by binary search of the sorted ids (no dict of a million ids).
        self.row_of = SortedKeys(self.document_ids)
        self.is_message = documents.arrays["is_message"]
        self.is_context = documents.arrays["is_context"]
        self.message_count = int(self.is_message.sum())
        self.workspace_codes = documents.codes("workspace_id")
        self.workspace_code_of = documents.vocabulary("workspace_id")
        self.channel_codes = documents.codes("channel_id")
        self.channel_code_of = documents.vocabulary("channel_id")
        self.author_codes = documents.codes("author_id")
        self.author_code_of = documents.vocabulary("author_id")
        self.type_codes = documents.codes("conversation_type")
        self.type_code_of = documents.vocabulary("conversation_type")
        self.ts_us = documents.arrays["ts_us"]
        self.time_runs = TimeRuns(self.ts_us)
        self.is_thread = documents.arrays["is_thread"]
        self.has_link = documents.arrays["has_link"]
        self.thread_keys = documents.arrays["thread_keys"]
        self.context_members = documents.context_members
        self.reply_roots = documents.arrays["reply_roots"]
        self.replies_of = documents.replies_of
        self._display = documents.display()

    def _load_vectors(self, mapped: arrays.VectorArrays) -> None:
        # Position i is row vector_rows[i], ascending, so ranking by position keeps the
        # row-index tie-break. Thread contexts have no vector. The inverse map (-1: no
        # vector) turns a filter's rows into positions at the cost of the rows it keeps.
        self.vector_position_of_row = np.full(self.row_count, -1, dtype=np.int32)
        if len(mapped.rows) != self.metadata["vector_count"] or (
            len(mapped.rows) and not 0 <= mapped.rows[0] <= mapped.rows[-1] < self.row_count
        ):
            raise SlackqueryError(f"artifact {self.build_id} has vector arrays of another build")
        if len(mapped.rows) == 0:
            self.dimension = 0
            self.vectors = np.zeros((0, 0), dtype=np.float32)
            self.vector_rows = np.zeros(0, dtype=np.int64)
            self.vector_scan: Int8Scan | None = None
            self.searchable_vectors = None
            return
        self.vector_rows = mapped.rows
        self.vectors = mapped.vectors
        self.dimension = int(self.vectors.shape[1])
        # The int8 codes the semantic scan reads; searches share passes over them (semantic.py).
        self.vector_scan = Int8Scan(mapped.codes)
        self.vector_position_of_row[self.vector_rows] = np.arange(
            len(self.vector_rows), dtype=np.int32
        )
        on_messages = self.is_message[self.vector_rows]
        # Positions semantic search may return without filters (None: all of them).
        self.searchable_vectors = None if on_messages.all() else np.flatnonzero(on_messages)

    def message_vector_positions(self, mask: np.ndarray) -> np.ndarray:
        """Ascending matrix positions of the message vectors on the rows `mask` keeps."""
        rows = np.flatnonzero(mask)
        positions = self.vector_position_of_row[rows[self.is_message[rows]]]
        return positions[positions >= 0]

    def _load_names(self) -> None:
        connection = self._connection
        self.workspaces = connection.execute(
            "select workspace_id, workspace_slug, workspace_name, workspace_url from workspaces "
            "order by workspace_slug, workspace_id"
        ).fetchall()
        self.channels = connection.execute(
            "select workspace_id, channel_id, channel_name, conversation_type, message_count, "
            "first_ts_us, last_ts_us from channels order by workspace_id, channel_name, channel_id"
        ).fetchall()
        self.users = connection.execute(
            "select workspace_id, user_id, user_name, username, real_name, display_name "
            "from users order by workspace_id, user_id"
        ).fetchall()
        self.workspace_names = {row[0]: (row[1], row[2]) for row in self.workspaces}
        # (workspace, user) -> channel ids they belong to. Artifacts built before
        # memberships were copied have none: their restricted channels stay hidden.
        self.memberships: dict[tuple[str, str], set[str]] = {}
        try:
            members = connection.execute(
                "select workspace_id, user_id, channel_id from channel_members"
            ).fetchall()
        except duckdb.CatalogException:
            members = []
        for workspace, user, channel in members:
            self.memberships.setdefault((workspace, user), set()).add(channel)
        self.account_limits = account_limits(connection)
        self.channel_by_name: dict[str, set[str]] = {}
        for row in self.channels:
            if row[2]:
                self.channel_by_name.setdefault(fold_name(row[2]), set()).add(row[1])
        self.user_by_name: dict[str, set[str]] = {}
        # Author codes by each word of a user's names, for questions that name people
        # ("what did Nikhil say", "Chloé's fix"); stop words and 1-2 letter words never
        # count as a name.
        self.author_codes_by_word: dict[str, set[int]] = {}
        for row in self.users:
            for name in row[2:]:
                if name:
                    self.user_by_name.setdefault(fold_name(name), set()).add(row[1])
                    for word in fts_tokens(str(name)):
                        if (
                            len(word) >= 3
                            and word not in STOPWORDS
                            and row[1] in self.author_code_of
                        ):
                            self.author_codes_by_word.setdefault(word, set()).add(
                                self.author_code_of[row[1]]
                            )

    # -- visibility ------------------------------------------------------------------
    def visibility(self, requester: Requester | None) -> Visibility | None:
        """What `requester` may see (None: everything), kept for the `VISIBILITIES_KEPT`
        requesters seen last."""
        if requester is None:
            return None
        with self._lock:
            found = self._visibility.get(requester.key)
            if found is not None:
                self._visibility.move_to_end(requester.key)
        if found is None:
            found = compute_visibility(self, requester)
            with self._lock:
                found = self._visibility.setdefault(requester.key, found)
                while len(self._visibility) > VISIBILITIES_KEPT:
                    self._visibility.popitem(last=False)
        return found

    # -- filters ---------------------------------------------------------------------
    def resolve_workspaces(
        self, values: Sequence[str], visible: Visibility | None = None
    ) -> tuple[str, ...]:
        """Workspace ids, slugs or names -> ids; unknown (or invisible) values are an error."""
        resolved: set[str] = set()
        by_label = {}
        for workspace_id, slug, name, _url in self.workspaces:
            if visible is not None and workspace_id != visible.workspace_id:
                continue
            for label in (workspace_id, slug, name):
                if label:
                    by_label.setdefault(fold_name(label), set()).add(workspace_id)
        for value in values:
            found = by_label.get(fold_name(value.strip()))
            if not found:
                raise SlackqueryError(
                    f"unknown workspace {value!r}{_close_matches(value, by_label)} "
                    "(list_slack_scopes, or `slackquery scopes`, lists workspaces)"
                )
            resolved |= found
        return tuple(sorted(resolved))

    def resolve_channels(
        self, values: Sequence[str], visible: Visibility | None = None
    ) -> tuple[str, ...]:
        """Channel ids or names (`#eng`, `eng`, `<#C123|eng>`) -> ids.

        With `visible`, channels the requester may not see do not exist here: the same
        error, the same close matches, as for a name nobody ever used."""
        if visible is None:
            known_ids = {row[1] for row in self.channels} | set(self.channel_code_of)
            by_name = self.channel_by_name
        else:
            known_ids = {channel for _, channel in visible.channels}
            by_name = {
                name: ids & known_ids
                for name, ids in self.channel_by_name.items()
                if ids & known_ids
            }
        return _resolve_names(
            values,
            "#",
            known_ids,
            by_name,
            "channel",
            " (list_slack_scopes, or `slackquery scopes`, lists channels)",
        )

    def resolve_authors(
        self, values: Sequence[str], visible: Visibility | None = None
    ) -> tuple[str, ...]:
        """User ids or names (`@priya`, display/real/user names, `<@U123>`) -> ids.

        Names match without regard to case or accents, so `@chloe` finds "Chloé". With
        `visible`, only the authors of messages the requester may see exist: one who wrote
        only where they may not look reads as a name nobody has."""
        if visible is None:
            known_ids = {row[1] for row in self.users} | set(self.author_code_of)
            by_name = self.user_by_name
        else:
            known_ids = {
                row[1]
                for row in self.users
                if row[0] == visible.workspace_id and self.wrote_visibly(row[1], visible)
            }
            by_name = {
                name: ids & known_ids for name, ids in self.user_by_name.items() if ids & known_ids
            }
        return _resolve_names(
            values,
            "@",
            known_ids,
            by_name,
            "author",
            " (an author is a user id U…, or @ and a handle, display or real name)",
        )

    def wrote_visibly(self, user_id: str, visible: Visibility) -> bool:
        """Whether the user wrote a message the requester may see."""
        code = self.author_code_of.get(user_id)
        return code is not None and bool(visible.authors[code])

    @cached_property
    def _time_span_us(self) -> tuple[int, int]:
        return (int(self.ts_us.min()), int(self.ts_us.max())) if self.ts_us.size else (0, 0)

    def time_span_us(self, visible: Visibility | None = None) -> tuple[int, int]:
        """First and last posting time the requester may see, the span the days a question
        names are read in; the whole artifact's is taken on first use, so loading an
        artifact never reads every row's time."""
        return self._time_span_us if visible is None else visible.time_span_us

    @cached_property
    def source_ids_are_document_ids(self) -> bool:
        """Whether every message's source message id is its document id (a Slack export's
        are; a Beacon corpus's are not), so an id that is no document id is no source id
        either; taken on first use (one scan of the messages)."""
        cursor = self.cursor()
        try:
            row = cursor.execute(
                "select count(*) from search_documents where document_kind = 'message' "
                "and source_message_id is distinct from document_id"
            ).fetchone()
        finally:
            cursor.close()
        return row is not None and row[0] == 0

    def channels_named_in(self, text: str) -> np.ndarray:
        """Channel codes of the `#name` or `#C…` mentions in `text` that exist (maybe none);
        Slack's own `<#C123|name>` names the channel by its id."""
        codes = {
            self.channel_code_of[channel_id]
            for name in _CHANNEL_MENTION.findall(text)
            for channel_id in (*self.channel_by_name.get(fold_name(name), ()), name)
            if channel_id in self.channel_code_of
        }
        return np.array(sorted(codes), dtype=np.int32)

    def channel_names_of(self, codes: np.ndarray) -> list[str]:
        """`#name` of each channel code (its id when it has no name), sorted, once each."""
        wanted = set(codes.tolist())
        return sorted(
            {
                f"#{name or channel_id}"
                for _, channel_id, name, *_ in self.channels
                if self.channel_code_of.get(channel_id) in wanted
            }
        )

    def authors_named_in(self, text: str, visible: Visibility | None = None) -> np.ndarray:
        """Author codes of the users whose names appear as words of `text` (maybe none);
        with `visible`, only those who wrote a message the requester may see."""
        codes: set[int] = set()
        for word in set(fts_tokens(text)):
            codes |= self.author_codes_by_word.get(word, set())
        if visible is not None:
            codes = {code for code in codes if visible.authors[code]}
        return np.array(sorted(codes), dtype=np.int32)

    def mask(self, filters: Filters) -> np.ndarray:
        """Rows (of any kind) passing every filter; kinds are restricted by the caller."""
        keep: np.ndarray | None = None  # no pass over every row until a filter needs one

        def narrow(rows: np.ndarray) -> None:
            nonlocal keep
            keep = rows if keep is None else np.logical_and(keep, rows, out=keep)

        for values, codes, code_of in (
            (filters.workspace_ids, self.workspace_codes, self.workspace_code_of),
            (filters.channel_ids, self.channel_codes, self.channel_code_of),
            (filters.author_ids, self.author_codes, self.author_code_of),
            (filters.conversation_types, self.type_codes, self.type_code_of),
        ):
            if values is not None:
                wanted = [code_of[value] for value in values if value in code_of]
                narrow(rows_with_codes(codes, wanted, len(code_of)))
        if filters.start_ts_us is not None or filters.end_ts_us is not None:
            narrow(self.time_runs.rows_between(filters.start_ts_us, filters.end_ts_us))
        if filters.is_thread:
            narrow(self.is_thread.copy())
        if filters.has_link:
            narrow(self.has_link.copy())
        return np.ones(self.row_count, dtype=bool) if keep is None else keep

    # -- display rows ----------------------------------------------------------------
    def display_row(self, row: int) -> dict[str, object]:
        """Display columns of one artifact row, from its mapped record."""
        return self._display.row(row)

    def texts(self, rows: Sequence[int]) -> dict[int, str]:
        """`text_lexical` of these rows (used to verify quoted phrases)."""
        ids = [self.document_ids[row] for row in rows]
        cursor = self.cursor()
        try:
            result = cursor.execute(
                "select document_id, text_lexical from search_documents "
                "where document_id in (select unnest($ids))",
                {"ids": ids},
            ).fetchall()
        finally:
            cursor.close()
        return {self.row_of[doc]: text or "" for doc, text in result}
