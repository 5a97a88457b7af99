"""The retrieval arms: one small unit per way of finding candidates, and their registry.

Every arm has the same signature: it reads the shared `QueryContext` (parsed query,
filters and eligible rows, query vectors, artifact) and returns a ranking of artifact rows,
or None when it has nothing to say about this query. `ARMS` is the one registry: fusion
weights (serving/fusion.py), the evaluation grid's axes (slackquery/evaluation/grid.py) and
the per-arm signals of every search hit (serving/models.py) are derived from it by name.
Adding an arm means writing its `rank` function and registering an `Arm`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from serving.context import QueryContext
from serving.query import day_spans, day_window_us, named_days, time_frames
from serving.ranking import ArmRanking, top_candidates
from serving.semantic import best_indices, vector_scores_many

ROUTES = ("exact", "conceptual", "mixed")
# How a thread-context hit becomes a message for fusion (see `thread_votes`).
CONTEXT_TARGETS = ("best", "root", "thread")
# The parts of a multi-part question are ranked among the whole question's best matches by
# cosine, not over every vector: a part's answer is about the question too, and at 1M
# vectors one more pass for two parts costs ~165 ms (this pool: a few ms). Corpora with at
# most this many eligible vectors (Beacon, the sample workspace) rank parts over all.
ASPECT_POOL = 10_000


@dataclass(frozen=True, eq=False)
class Arm:
    """One registered arm: its name, ranking function, default weight per route, the
    description of its per-hit signal (an MCP output field), and the modes it runs in."""

    name: str
    rank: Callable[[QueryContext], ArmRanking | None]
    weights: Mapping[str, float]
    signal: str
    modes: tuple[str, ...] = ("hybrid",)


def rank_lexical(ctx: QueryContext) -> ArmRanking | None:
    """BM25 over messages, a reply's root as a second field (`with_root_field`)."""
    if not ctx.terms.known:
        return None
    rows, scores = ctx.lexical_candidates(ctx.artifact.is_message)
    best = top_candidates(rows, scores, ctx.window)
    if ctx.fusion.root_field_weight > 0:
        best = top_candidates(*with_root_field(ctx, best), ctx.window)
    return best


def with_root_field(ctx: QueryContext, best: ArmRanking) -> tuple[np.ndarray, np.ndarray]:
    """The window's best messages and the replies of the roots among them, scored as BM25
    of the message plus `root_field_weight` x BM25 of the message its thread started with
    (a second field, in BM25F's linear form): "03:45 UTC, been that way for ages." is found
    by the words of the question it answers, at a weight below a message's own words, so
    the replies of a thread that only names the topic do not outrank a message that says
    the answer (docs/evaluation.md).

    Exact, for a weight below 1 (the default 0.25), for a reply without words of its own in
    the query: it can only reach the window through a root scoring above the window's last,
    and such a root is among `best`. A root lends its words to every reply the query may
    rank, whatever the filters say of the root, but a reply without words of its own is
    found only through a root the query may rank too (the cost of finding it otherwise: a
    second pass over the postings, which more than doubled the lexical arm's time at 1M
    messages).
    """
    artifact, terms = ctx.artifact, ctx.terms
    replies = artifact.replies_of(best.rows)[0]  # a row that is no root has none
    replies = replies[ctx.eligible(replies, kind=artifact.is_message)]
    added = np.setdiff1d(replies, best.rows)
    rows = np.concatenate([best.rows.astype(np.int64), added])
    parents = artifact.reply_roots[rows]
    answering = parents >= 0
    # The added replies' own scores and every root's, in one pass over the terms' postings.
    scored = np.union1d(added, parents[answering])
    found = artifact.bm25.scores_of(terms.known, scored, terms.idf_scale)
    scores = np.concatenate([best.scores, found[np.searchsorted(scored, added)]])
    root_scores = found[np.searchsorted(scored, parents[answering])]
    scores[answering] += np.float32(ctx.fusion.root_field_weight) * root_scores
    return rows, scores


def rank_semantic(ctx: QueryContext) -> ArmRanking:
    """Cosine of the question with every eligible message vector."""
    return ctx.semantic_best


def rank_context(ctx: QueryContext) -> ArmRanking | None:
    """BM25 over thread-context documents, each matching thread voting for a message."""
    if not ctx.terms.known:
        return None
    rows, scores = ctx.lexical_candidates(ctx.artifact.is_context)
    return thread_votes(ctx, top_candidates(rows, scores, ctx.window))


def thread_votes(ctx: QueryContext, threads: ArmRanking) -> ArmRanking:
    """Turn ranked thread-context hits into a ranking of messages.

    `root`: each thread votes for its first eligible message (the root). `thread`: every
    eligible message of the thread shares the thread's rank. `best`: the thread votes for
    its eligible message most similar to the query (cosine; root when no vector).
    Cost: the members of at most `candidate_window` threads, never the corpus.
    """
    artifact, target = ctx.artifact, ctx.fusion.context_target
    groups: list[tuple[int, float, np.ndarray]] = []
    for rank, (thread_row, score) in enumerate(
        zip(threads.rows.tolist(), threads.scores.tolist(), strict=True), start=1
    ):
        members = artifact.context_members(thread_row)
        if members.size == 0:
            continue
        passing = ctx.eligible(members, kind=artifact.is_message)
        if passing.any():
            groups.append((rank, score, members[passing]))
    cosines = _member_cosines(ctx, groups) if target == "best" and groups else None
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


def _member_cosines(ctx: QueryContext, groups: list[tuple[int, float, np.ndarray]]) -> np.ndarray:
    """Cosine with the question of every member of every thread, in group order, from one
    matrix product; members without a vector score -inf, so a thread without any vectors
    falls back to its root."""
    artifact = ctx.artifact
    everything = np.concatenate([members for _, _, members in groups])
    cosines = np.full(everything.size, -np.inf, dtype=np.float32)
    positions = artifact.vector_position_of_row[everything]
    has_vector = positions >= 0
    if has_vector.any():
        cosines[has_vector] = artifact.vectors[positions[has_vector]] @ ctx.query_vector
    return cosines


def rank_aspects(ctx: QueryContext) -> ArmRanking | None:
    """Rank messages by cosine with each part of a multi-part question, then interleave the
    parts: a message's rank is its best rank in any part's list, so each part's top hits
    compete near the top, not only the part the whole question's vector leans to. One pass
    over the pool's vectors for all parts."""
    if not ctx.aspects or ctx.artifact.vector_rows.size == 0:
        return None
    keys, scores = ctx.cosines
    positions = ctx.vector_positions
    pool = best_indices(scores, ASPECT_POOL)
    if pool is not None:
        positions = pool if positions is None else positions[pool]
        keys = keys[pool]
    rows = ctx.rows_of(keys)
    best: dict[int, tuple[int, float]] = {}
    part_vectors = ctx.query_vectors[1:]
    artifact = ctx.artifact
    for part_scores in vector_scores_many(
        artifact.vectors, part_vectors, positions, artifact.vector_scan
    ):
        ranking = top_candidates(rows, part_scores, ctx.window)
        for rank, (row, score) in enumerate(
            zip(ranking.rows.tolist(), ranking.scores.tolist(), strict=True), start=1
        ):
            if row not in best or rank < best[row][0]:
                best[row] = (rank, score)
    ordered = sorted(best.items(), key=lambda item: (item[1][0], -item[1][1], item[0]))
    ctx.notes.append("searched each part: " + " | ".join(ctx.aspects))
    return ArmRanking(
        np.array([row for row, _ in ordered], dtype=np.int64),
        np.array([score for _, (_, score) in ordered], dtype=np.float32),
        np.array([rank for _, (rank, _) in ordered], dtype=np.int64),
    )


def rank_authors(ctx: QueryContext) -> ArmRanking | None:
    """Messages by the people the question names, by cosine: a hint, never a filter."""
    if ctx.filters.author_ids:
        return None
    named = ctx.artifact.authors_named_in(ctx.text, ctx.visible)
    if not named.size:
        return None
    keys, scores = ctx.cosines
    rows = ctx.rows_of(keys)
    by_named = np.isin(ctx.artifact.author_codes[rows], named)
    return top_candidates(rows[by_named], scores[by_named], ctx.window)


def rank_scope(ctx: QueryContext) -> ArmRanking | None:
    """Messages posted in the channels (`#build-help`) or on the days ("on Sep 28", "Sep
    14–18", "in September", "last week") the question names, by cosine: a hint, never a
    filter. A scope the request's filters already set is not named again."""
    artifact, filters = ctx.artifact, ctx.filters
    channels = artifact.channels_named_in(ctx.text) if filters.channel_ids is None else np.zeros(0)
    timed = filters.start_ts_us is not None or filters.end_ts_us is not None
    days = [] if timed else day_spans(named_days(ctx.text), artifact.time_span_us(ctx.visible))
    if not channels.size and not days:
        return None
    keys, scores = ctx.cosines
    rows = ctx.rows_of(keys)
    named: dict[str, np.ndarray] = {}
    if channels.size:
        # `rows` are the messages the requester may see: a named channel with none of them
        # is left out one by one, never named, so a hidden one reads as a nonexistent one.
        channels = channels[np.isin(channels, artifact.channel_codes[rows])]
    if channels.size:
        names = artifact.channel_names_of(channels)
        named[", ".join(names)] = np.isin(artifact.channel_codes[rows], channels)
    if days:
        posted = artifact.ts_us[rows]
        windows = [day_window_us(first, last) for first, last in days]
        label = ", ".join(
            str(first) if first == last else f"{first} to {last}" for first, last in days
        )
        named[label] = np.logical_or.reduce([(posted >= lo) & (posted <= hi) for lo, hi in windows])
    # A channel or day holding nothing the requester may see counts as not named, so a
    # channel they cannot see looks like one that does not exist.
    named = {label: in_scope for label, in_scope in named.items() if in_scope.any()}
    if not named:
        return None
    keep = np.logical_and.reduce(list(named.values()))
    if not keep.any():
        return None
    ctx.notes.append("ranked up messages in the scope the question names: " + "; ".join(named))
    return top_candidates(rows[keep], scores[keep], ctx.window)


def rank_latest(ctx: QueryContext) -> ArmRanking | None:
    """For a question about how things stand now ("currently", "still", "at present"), the
    semantic arm's candidates newest first. Fused like any arm, it lifts the later of two
    messages the cosine nearly ties (an update over what it replaced) and leaves clear
    gaps alone. (Oldest first for "originally" questions lost: docs/evaluation.md.)"""
    best = ctx.semantic_best
    if not best.rows.size or "latest" not in time_frames(ctx.text):
        return None
    newest = np.argsort(-ctx.artifact.ts_us[best.rows], kind="stable")
    ctx.notes.append("ranked up the latest messages: the question asks how things stand now")
    return ArmRanking(best.rows[newest], best.scores[newest])


# Default weights per route, decided by the rule in docs/evaluation.md ("Route weights, arm
# by arm"). `conceptual` (natural-language questions, most of what people and agents ask):
# the semantic arm leads and the lexical arm breaks ties; without that, hybrid ranks below
# the semantic arm alone. `exact` and `mixed`: equal weights, as no judged question gives
# evidence for more. The context weights are the original design's (the arm is off).
ARMS: tuple[Arm, ...] = (
    Arm(
        "lexical",
        rank_lexical,
        {"exact": 1.0, "conceptual": 0.25, "mixed": 1.0},
        "BM25 arm rank/score, if it found this (a reply's score adds its thread root's, "
        "weighted below its own).",
        modes=("lexical", "hybrid"),
    ),
    Arm(
        "semantic",
        rank_semantic,
        {"exact": 1.0, "conceptual": 1.5, "mixed": 1.0},
        "Embedding arm rank/score, if it found this.",
        modes=("semantic", "hybrid"),
    ),
    Arm(
        "context",
        rank_context,
        {"exact": 0.65, "conceptual": 0.25, "mixed": 0.65},
        "Thread-context arm rank/score: the thread as a whole matched.",
    ),
    Arm(
        "aspects",
        rank_aspects,
        {"exact": 0.5, "conceptual": 0.5, "mixed": 1.0},
        "Question-part arm rank/cosine: best rank for one part of a multi-part question "
        "(hybrid only).",
    ),
    Arm(
        "authors",
        rank_authors,
        {"exact": 0.5, "conceptual": 0.25, "mixed": 0.5},
        "Named-author arm rank/cosine: written by someone the question names (hybrid only).",
    ),
    Arm(
        "scope",
        rank_scope,
        {"exact": 1.0, "conceptual": 1.0, "mixed": 1.0},
        "Named-scope arm rank/cosine: posted in a channel or on a day the question names "
        "(hybrid only).",
    ),
    Arm(
        "latest",
        rank_latest,
        {"exact": 1.0, "conceptual": 1.0, "mixed": 1.0},
        "Latest-first arm rank/cosine: the newest of the best matches, for a question about "
        "how things stand now (hybrid only).",
    ),
)


def arm_names(arms: tuple[Arm, ...] = ARMS) -> tuple[str, ...]:
    """The registered arms' names, in registry order."""
    return tuple(arm.name for arm in arms)
