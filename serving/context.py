"""The shared per-query context every retrieval arm and stage reads.

The engine validates a request, resolves its filters and builds one `QueryContext`; the
arms (serving/arms.py) and the stages after fusion (serving/stages.py) only read it. Work
that several arms need (the query vectors, cosine over the eligible
vectors) is computed once, on first use, so an arm never reaches into another arm's
results and an arm that does not run costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from serving.query import query_aspects
from serving.ranking import ArmRanking, top_candidates
from serving.semantic import vector_scores

if TYPE_CHECKING:
    from collections.abc import Callable

    from serving.access import Visibility
    from serving.artifact import Filters, LoadedArtifact
    from serving.fusion import FusionConfig
    from serving.lexical import QueryTerms
    from serving.semantic import QueryEmbedder

Value = TypeVar("Value")


class computed_once(Generic[Value]):
    """`functools.cached_property` without its lock.

    On Python 3.11 that lock is one per property of the class, shared by every instance: with
    it, concurrent searches queued behind each other's query embedding and vector scan (8
    MCP clients at 20k messages: two thirds of the search time spent waiting on it, 48.8
    queries/s against 97.8 without it). A context belongs to one search on one thread, so
    it needs no lock.
    """

    def __init__(self, compute: Callable[[Any], Value]):
        self.compute = compute
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> Value:
        if instance is None:
            return self  # type: ignore[return-value]
        value = self.compute(instance)
        instance.__dict__[self.name] = value  # later reads find it before the descriptor
        return value


@dataclass
class QueryContext:
    """One search: its parsed text, filters, visible rows, and lazily shared work.

    `mask` marks the rows (of any kind) the query may rank: its filters, quoted phrases
    and the requester's visibility (None: every row). Arms apply it before ranking, so
    windows, scores and counts are those of the eligible rows only, never a post-filter.
    """

    text: str
    mode: str
    route: str
    fusion: FusionConfig
    artifact: LoadedArtifact
    filters: Filters
    mask: np.ndarray | None
    terms: QueryTerms
    embedder: QueryEmbedder
    active_arms: frozenset[str]
    max_query_parts: int
    # Matrix positions of the mask's message vectors when known in advance (a requester's
    # visibility without filters: computed once per requester, not per query).
    mask_positions: np.ndarray | None = None
    # What the requester may see (None: everything): the times and names a question's
    # words are read against are theirs.
    visible: Visibility | None = None
    # Share of messages with a vector, for the semantic and hybrid modes (None: lexical).
    vector_coverage: float | None = None
    notes: list[str] = field(default_factory=list)
    # Whether an arm had more matches than its window: the ranking's end is then not the
    # end of what matches, and the last page says so.
    window_filled: bool = False
    # Matching rows the per-thread cap left out (`fusion.fuse`), in fused order.
    over_thread_cap: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)
    _open: list[float] = field(default_factory=list, repr=False)
    _display_texts: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def window(self) -> int:
        """How many candidates each arm hands to fusion."""
        return self.fusion.candidate_window

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the block's wall time to `timings[name]`, minus blocks timed inside it
        (an arm that triggers the query embedding does not count the model's time)."""
        self._open.append(0.0)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            inner = self._open.pop()
            self.timings[name] = self.timings.get(name, 0.0) + elapsed - inner
            if self._open:
                self._open[-1] += elapsed

    def eligible(self, rows: np.ndarray, *, kind: np.ndarray) -> np.ndarray:
        """Which of `rows` are of the given kind (an artifact row flag) and pass the mask."""
        keep = kind[rows]
        if self.mask is not None:
            keep &= self.mask[rows]
        return keep

    def lexical_candidates(self, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Eligible rows of the given kind matching a known query term with their BM25
        scores (a requester's with their rescaled idf): at least the window's best, read
        without scoring every match (`BM25Index.candidates`)."""
        eligible = kind if self.mask is None else kind & self.mask
        return self.artifact.bm25.candidates(
            self.terms.known, self.window, eligible, self.terms.idf_scale
        )

    @computed_once
    def aspects(self) -> list[str]:
        """The parts of a multi-part question (at most `max_query_parts`, a note says when
        more were dropped), when the question-part arm runs."""
        if "aspects" not in self.active_arms:
            return []
        aspects = query_aspects(self.text, self.max_query_parts)
        note = aspects.note()
        if note:
            self.notes.append(note)
        return aspects.parts

    @computed_once
    def query_vectors(self) -> np.ndarray:
        """The question's vector, then one per part; the model embeds them in one batch."""
        with self.timed("embed"):
            return self.embedder.embed_many(
                [self.text, *self.aspects], self.artifact.generation_id, self.artifact.dimension
            )

    @property
    def query_vector(self) -> np.ndarray:
        """The whole question's vector."""
        return self.query_vectors[0]

    @computed_once
    def vector_positions(self) -> np.ndarray | None:
        """Matrix positions of the message vectors the query may rank (None: all)."""
        artifact = self.artifact
        if self.mask is None:
            return artifact.searchable_vectors
        if self.mask_positions is not None:
            return self.mask_positions
        return artifact.message_vector_positions(self.mask)

    @computed_once
    def cosines(self) -> tuple[np.ndarray, np.ndarray]:
        """Eligible message vectors and their cosine with the question, in matrix order, as
        (keys, scores): a key is the vector's artifact row when every vector is eligible,
        else its matrix position. Positions ascend with their rows, so ranking by either
        breaks ties alike, and `rows_of` maps only the keys an arm keeps (mapping a
        requester's every visible position cost ~2 ms a query at 1M)."""
        artifact, positions = self.artifact, self.vector_positions
        if artifact.vector_rows.size == 0:
            # Nothing embedded yet: no vector to compare, so the query is not embedded.
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = vector_scores(artifact.vectors, self.query_vector, positions, artifact.vector_scan)
        return (artifact.vector_rows if positions is None else positions), scores

    @computed_once
    def semantic_best(self) -> ArmRanking:
        """The window's best eligible messages by cosine, as artifact rows: the semantic
        arm's ranking, which the latest-first arm reorders."""
        keys, scores = self.cosines
        best = top_candidates(keys, scores, self.window)
        return ArmRanking(self.rows_of(best.rows), best.scores)

    def display_text(self, row: int) -> str:
        """A row's display text ("" when it has none), decoded once per search: the answer
        cue and the question stage both read the best hits' texts."""
        text = self._display_texts.get(row)
        if text is None:
            text = str(self.artifact.display_row(row)["text_display"] or "")
            self._display_texts[row] = text
        return text

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """The artifact rows of `cosines` keys."""
        return keys if self.vector_positions is None else self.artifact.vector_rows[keys]
