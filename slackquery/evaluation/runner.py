"""Run judged queries through the production pipeline and search engine.

With a corpus, the evaluation owns a dedicated home (`HOME/eval/<corpus name>-<content
hash>`) and runs every real step into it: import, dbt projection, embedding, artifact
build with validation, publish. The state database persists there, so a second run
re-embeds nothing. Without a corpus it evaluates whatever the configured home has
published. Either way queries go through `serving.engine.SearchEngine.search`, the
function the MCP tools call, and hits are matched to judged messages by
`source_message_id`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from serving.engine import SearchEngine
from serving.fusion import FusionConfig
from serving.models import SearchRequest
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.canonical.importer import import_source
from slackquery.embedding.work import embed_pending
from slackquery.errors import SlackqueryError
from slackquery.evaluation import MODES
from slackquery.evaluation.grid import (
    ARM_AXES,
    DEFAULT_POINT,
    FIXED_AXES,
    WEIGHT_AXES,
    GridPoint,
)
from slackquery.evaluation.metrics import MRR_K, RECALL_KS, QueryRun, query_row
from slackquery.evaluation.queries import JudgedQuery
from slackquery.evaluation.report import Evaluation, RunGroup
from slackquery.projection import project
from slackquery.settings import Settings

RESULT_DEPTH = max(*RECALL_KS, MRR_K)
CORPUS_FORMATS = {".jsonl": "beacon-jsonl", ".ndjson": "beacon-jsonl"}

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    """Default progress sink: say nothing."""


def corpus_settings(settings: Settings, corpus: Path) -> Settings:
    """Settings whose every path lives in the corpus's own evaluation home.

    Only the paths change; embedding and serving settings carry over, so the evaluation
    measures the configured model. The home is named after the corpus (parent folder and
    file stem, to read) and its content (`corpus_digest`): re-running on the same corpus
    finds its state again, and a changed corpus gets a fresh home, because re-importing
    another file into an old home keeps the old messages of every day the new file lacks.
    """
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{corpus.resolve().parent.name}-{corpus.stem}")
    values = settings.model_dump()
    values.update(
        home=settings.home / "eval" / f"{readable.strip('-.')}-{corpus_digest(corpus)}",
        canonical_db=None,
        state_db=None,
        artifact_dir=None,
        log_dir=None,
    )
    return Settings(**values)


def corpus_digest(corpus: Path) -> str:
    """The first 12 hex digits of the corpus's sha256: of a file's bytes (ZIP, JSONL; what
    `sha256sum` prints), or of an export folder's files, each with its path and size."""
    if not corpus.exists():
        raise SlackqueryError(f"{corpus}: corpus not found")
    digest = hashlib.sha256()
    files = [corpus]
    if corpus.is_dir():
        files = sorted(entry for entry in corpus.rglob("*") if entry.is_file())
    for path in files:
        if path != corpus:  # a folder's file: which one, and where its bytes end
            name = path.relative_to(corpus).as_posix()
            digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def prepare_corpus(
    settings: Settings, corpus: Path, *, progress: Progress = _quiet
) -> dict[str, Any]:
    """Import, project, embed, build and publish `corpus` into `settings`' home.

    Every step is the production entry point and is idempotent on unchanged input, so
    repeating it costs a projection and a build but no embedding.
    """
    if not corpus.exists():
        raise SlackqueryError(f"{corpus}: corpus not found")
    source_format = CORPUS_FORMATS.get(corpus.suffix.lower())
    steps: dict[str, Any] = {}
    progress(f"import {corpus} into {settings.home}")
    steps["import"] = import_source(settings, corpus, source_format=source_format)
    progress("project (dbt build)")
    steps["project"] = project(settings)
    progress("embed pending documents")
    # A whole corpus embeds for minutes the first time: the embed command's bar, on a terminal.
    steps["embed"] = embed_pending(settings, progress=sys.stderr.isatty())
    progress("build and validate the artifact")
    build_id = build_artifact(settings)
    steps["build_id"] = build_id
    progress(f"publish {build_id}")
    steps["publish"] = publish(settings, build_id)
    return steps


def fusion_config(point: GridPoint, base: FusionConfig | None = None) -> FusionConfig:
    """The `FusionConfig` for one grid point: the default with the point's overrides."""
    base = base or FusionConfig()
    overrides = point.overrides
    changes: dict[str, Any] = {
        axis: value for axis, value in overrides.items() if axis in FIXED_AXES
    }
    switched = {ARM_AXES[axis]: on for axis, on in overrides.items() if axis in ARM_AXES}
    disabled = {arm for arm in base.disabled_arms if switched.get(arm, False) is False}
    disabled |= {arm for arm, on in switched.items() if not on}
    weights = {route: dict(arms) for route, arms in base.route_weights.items()}
    for axis, weight in overrides.items():
        if axis in WEIGHT_AXES:
            routes, arm = WEIGHT_AXES[axis]
            for route in routes:
                weights.setdefault(route, {})[arm] = weight
    return dataclasses.replace(
        base, route_weights=weights, disabled_arms=frozenset(disabled), **changes
    )


def artifact_facts(artifact: Path) -> tuple[dict[str, Any], set[str]]:
    """The artifact's identity (build, generation, counts) and every source message id in it.

    Read from a read-only connection, like serving: the ids let the evaluation warn about
    judged messages the artifact cannot return at all.
    """
    with duckdb.connect(str(artifact), read_only=True) as connection:
        row = connection.execute(
            "select build_id, generation_id, document_count, message_count, built_at "
            "from artifact_metadata"
        ).fetchone()
        source_ids = {
            source_id
            for (source_id,) in connection.execute(
                "select distinct source_message_id from search_documents "
                "where source_message_id is not null"
            ).fetchall()
        }
    if row is None:
        raise SlackqueryError(f"{artifact}: the artifact has no metadata row")
    keys = ("build_id", "generation_id", "document_count", "message_count", "built_at")
    info = {key: value for key, value in zip(keys, row, strict=True)}
    info["built_at"] = str(info["built_at"])
    return info, source_ids


def build_request(query: JudgedQuery, mode: str, limit: int = RESULT_DEPTH) -> SearchRequest:
    """The search request for a judged query: its text, and its filters as the engine takes
    them (channel and author *names* are resolved by the engine, as for MCP clients)."""
    filters = query.filters
    start_us, end_us = filters.ts_bounds_us(query.timezone)
    return SearchRequest(
        query=query.query,
        mode=mode,
        channel_ids=[f"#{filters.channel}"] if filters.channel else None,
        author_ids=[f"@{filters.author}"] if filters.author else None,
        start_ts_us=start_us,
        end_ts_us=end_us,
        limit=limit,
    )


def run_query(
    engine: SearchEngine,
    request: SearchRequest,
    query: JudgedQuery,
    fusion: FusionConfig | None,
) -> tuple[QueryRun, dict[str, float]]:
    """Search once, timing the call; a user-facing search error becomes a recorded miss.

    Returns the run and the engine's own stage timings (`embed`, `lexical`, ...). A hit
    without a source message id (not expected from the importers) is matched by its
    document id, so it can never match judged ids by accident.
    """
    started = time.perf_counter()
    try:
        response = engine.search(request, fusion=fusion)
    except SlackqueryError as error:
        elapsed = (time.perf_counter() - started) * 1000
        return QueryRun(query, (), (), elapsed, error=str(error)), {}
    elapsed = (time.perf_counter() - started) * 1000
    hits = response.results
    cosines = [hit.semantic.score for hit in hits if getattr(hit, "semantic", None) is not None]
    run = QueryRun(
        query,
        tuple(hit.source_message_id or hit.document_id for hit in hits),
        tuple(float(hit.fused_score) for hit in hits),
        elapsed,
        top_cosine=float(max(cosines)) if cosines else None,
    )
    return run, dict(response.timings_ms)


def evaluate(
    settings: Settings,
    queries: Sequence[JudgedQuery],
    *,
    queries_file: str,
    split: str,
    modes: Sequence[str] = MODES,
    grid: Sequence[GridPoint] = (DEFAULT_POINT,),
    corpus: Path | None = None,
    prepare: bool = True,
    progress: Progress = _quiet,
) -> Evaluation:
    """Evaluate `queries` in every mode (and, for hybrid, every grid point).

    Each query is first searched once in semantic mode, untimed for the tables: that loads
    the artifact and embeds the query text (the engine caches query vectors per text), and
    its `embed` timing is kept per query. So every reported latency is a warm search that
    no mode pays more for by running first, and the query-embedding cost is reported
    beside it instead of being hidden. With `prepare=False` a corpus's home is used as its
    last preparation left it (several query sets over one corpus prepare it once).
    """
    if not queries:
        raise SlackqueryError(f"{queries_file}: no queries in split {split!r}")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise SlackqueryError(f"modes must be a subset of {', '.join(MODES)}, got {list(modes)}")
    if corpus is not None:
        settings = corpus_settings(settings, corpus)
        if prepare:
            prepare_corpus(settings, corpus, progress=progress)
    artifact = current_artifact(settings)
    if artifact is None:
        raise SlackqueryError(
            f"no published search artifact under {settings.artifact_path}; "
            "publish one first or pass --corpus"
        )
    info, warnings = inspect_artifact(settings, artifact, queries, progress)
    engine = SearchEngine(settings)
    try:
        # First-time costs: each embedding mode is warmed up from an empty query cache, so
        # its "embed" time is what a new query costs in that mode (hybrid embeds a
        # multi-part question's parts in one batch with it). The last warm-up leaves the
        # cache full for the measured runs.
        first_embed_ms: dict[str, dict[str, float]] = {}
        warm_modes = [mode for mode in ("semantic", "hybrid") if mode in modes] or modes[:1]
        for warm_mode in warm_modes:
            progress(f"warm up {warm_mode}: {len(queries)} queries")
            engine.query_embedder.forget()
            for query in queries:
                _, timings = run_query(engine, build_request(query, warm_mode), query, None)
                if "embed" in timings:
                    first_embed_ms.setdefault(warm_mode, {})[query.id] = timings["embed"]

        base = engine_default(settings)
        groups: list[RunGroup] = []
        for mode in modes:
            for point in grid if mode == "hybrid" else (DEFAULT_POINT,):
                progress(f"{mode} {point.name}: {len(queries)} queries")
                # The default point passes no config, so it measures exactly what serving
                # runs; grid points change only their own axes of that default.
                fusion = None if point.is_default else fusion_config(point, base)
                rows = []
                for query in queries:
                    run, _ = run_query(engine, build_request(query, mode), query, fusion)
                    row = query_row(run)
                    if query.id in first_embed_ms.get(mode, {}):
                        row["query_embedding_ms"] = first_embed_ms[mode][query.id]
                    rows.append(row)
                groups.append(RunGroup(mode, point.name, dict(point.overrides), rows))
    finally:
        engine.close()
    return Evaluation(
        queries_file=queries_file,
        split=split,
        groups=groups,
        corpus=str(corpus) if corpus else None,
        artifact=info,
        warnings=warnings,
    )


def engine_default(settings: Settings) -> FusionConfig:
    """The fusion configuration the engine uses when given none (its window is a setting)."""
    return FusionConfig(candidate_window=settings.search_candidate_window)


def inspect_artifact(
    settings: Settings, artifact: Path, queries: Sequence[JudgedQuery], progress: Progress
) -> tuple[dict[str, Any], list[str]]:
    """The artifact's identity (`artifact_facts`, its path and home) and, per query, a
    warning about judged messages it does not hold; those are summarised on `progress`
    before any query runs, so a mismatch of queries and corpus shows before its figures."""
    info, source_ids = artifact_facts(artifact)
    info.update(path=str(artifact), home=str(settings.home))
    progress(f"artifact {info['build_id']}: {info['message_count']:,} messages")
    missing = missing_judged_ids(queries, source_ids)
    if missing:
        progress(f"warning: {missing_summary(missing, len(queries))}")
    return info, missing_evidence_warnings(missing)


def missing_judged_ids(queries: Sequence[JudgedQuery], known: set[str]) -> dict[str, list[str]]:
    """Per query, its judged message ids (evidence groups and `relevant:`) not in `known`.

    Such a message can never be retrieved, so the query's recall or nDCG has a ceiling
    below 1; usually it means the queries and the corpus do not match.
    """
    missing = {
        query.id: sorted((query.evidence_ids | set(query.relevant)) - known) for query in queries
    }
    return {query_id: ids for query_id, ids in missing.items() if ids}


def missing_evidence_warnings(missing: Mapping[str, Sequence[str]]) -> list[str]:
    """One warning per query with judged messages missing from the artifact."""
    return [
        f"query {query_id}: {len(ids)} judged message(s) not in the artifact: {_first(ids)}"
        for query_id, ids in missing.items()
    ]


def missing_summary(missing: Mapping[str, Sequence[str]], queries: int) -> str:
    """All missing judged messages in one line: how many, for how many queries, the first."""
    ids = sorted({message_id for ids in missing.values() for message_id in ids})
    return (
        f"{len(missing)} of {queries} queries judge {len(ids)} message(s) the artifact does "
        f"not hold ({_first(ids)}): their recall or nDCG cannot reach 1. Do the queries "
        "match the corpus? (per query: the warnings of the report and of --json)"
    )


def _first(ids: Sequence[str], shown: int = 3) -> str:
    return ", ".join(ids[:shown]) + (" ..." if len(ids) > shown else "")
