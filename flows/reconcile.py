"""Prefect flow `reconcile`: project → embed → build + validate → publish, one run at a time.

Reads the canonical store (through dbt, attached read-only). Writes the state database
(projection, embedding work items, build history), one new artifact file, and the
`current.duckdb` pointer. Safe to re-run at any point, including after a SIGKILL:
- one reconcile at a time: an exclusive `flock` on HOME/reconcile.lock, which the kernel
  releases when the holder dies, so a crashed run never blocks the next one;
- projection and embedding resume from the state database (incremental models, leased
  work items);
- the build is skipped when the source watermark and embedding generation equal those of
  the published artifact and embedding has not moved on since it was built (see
  `COVERAGE_STEP`) and the published artifact still matches its seal (a damaged one is
  rebuilt); a build that was validated but never published (a run killed between the two)
  is published instead of rebuilt; a build of another artifact schema version counts for
  neither, so an upgrade that changes the schema rebuilds on its own;
- an operator's rollback sticks: while the inputs are those of a newer build that was
  published and then rolled back from, nothing is built or published (a build that was
  published once is a rollback target the operator publishes by hand, never reconcile);
  new inputs give a new build, published as usual; a lost pointer (`current.duckdb`
  removed) is set again to the build the history records published, where its file is
  kept, so a rollback holds through that too;
- a refusal sticks too: while the inputs are those of the newest build of them that
  validation refused, and what it was checked against (the published artifact, drift
  settings, checks) is unchanged, nothing is built and the run fails naming that build, as
  the refusal itself did, instead of spending a build on the same refusal every run;
  new inputs build as usual, and `force_build` retries the same ones;
- build and publish only ever add files and swap the pointer atomically; a run with
  nothing to publish still brings the build history in line with the pointer (a publish
  killed right after its swap left it behind) and removes what killed builds left.

Embedding runs as the `embed` flow (a subflow, on Dask when `dask_workers` or
`dask_address` is given), so the deployed reconcile gets the same task retries and fan-out
that `slackquery embed` and the flow tests exercise.

Project decision (STYLE §9): the state database is the source of truth, so tasks neither
cache nor persist results. For the same reason `reconcile_plain` can run the same steps
without Prefect (no API to start), with the same guarantees; its embedding step is the
plain loop the embed flow's tasks wrap (`embed_pending`).
"""

import contextlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import duckdb
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.embed import with_dask
from slackquery.artifacts import files, history, inputs, schema, validate
from slackquery.artifacts.build import COPIED_MARTS, build_artifact
from slackquery.artifacts.pointer import current_artifact, current_target
from slackquery.artifacts.publish import publish, record_pointer
from slackquery.duckdb_setup import open_database
from slackquery.embedding import state as embedding_state
from slackquery.embedding.current import WANTED_DOCUMENTS
from slackquery.embedding.work import embed_pending
from slackquery.errors import SlackqueryError
from slackquery.projection import project
from slackquery.settings import Settings, get_settings

# A build made while embedding was still going on (SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE
# below 1) lags behind once more messages have their vector. Reconcile builds again when
# embedding has finished (every active message without a vector is terminal_failed, so
# no run will add one), or when the vectors grew by at least this share of the active
# messages since the build: at most ten intermediate rebuilds over a whole first embedding,
# whatever pace the runs keep, where rebuilding on every gain would cost a full build
# (about 2 minutes at 1M messages, docs/performance.md) per run of a deployment whose
# embed step stops early (an endpoint's outage or rate limit) and gains a few hundred.
COVERAGE_STEP = 0.1


@task(cache_policy=NO_CACHE, persist_result=False)
def project_documents(full_refresh: bool, progress: bool = False) -> dict[str, Any]:
    """Run the dbt projection (incremental unless `full_refresh`; `progress`: its bar)."""
    return project(get_settings(), full_refresh=full_refresh, progress=progress)


@dataclass(frozen=True)
class EmbeddingProgress:
    """How far embedding of the current generation has come, as `embedding-status`
    counts it: active messages, those with their current vector, and those the endpoint
    rejected (never claimed again unless `embed --retry-failed` asks)."""

    wanted: int
    embedded: int
    terminal_failed: int

    @property
    def finished(self) -> bool:
        """Whether no run will add a vector: every message without one is terminal_failed."""
        return self.embedded + self.terminal_failed >= self.wanted

    def gain_over(self, build: dict[str, Any]) -> int:
        """How many more messages have a vector now than in `build` (its recorded counts);
        0 for a build without counts."""
        counts = build.get("counts_json") or {}
        vectors = counts.get("vector_count")
        return 0 if vectors is None else self.embedded - int(vectors)

    def leaves_behind(self, build: dict[str, Any]) -> bool:
        """Whether `build`, of the current inputs, lags enough behind embedding to be built
        again: it has fewer vectors and embedding has finished, or gained `COVERAGE_STEP`."""
        gain = self.gain_over(build)
        return gain > 0 and (self.finished or gain >= COVERAGE_STEP * self.wanted)


def _embedding_progress(
    conn: duckdb.DuckDBPyConnection, generation: inputs.Generation
) -> EmbeddingProgress:
    """The state's embedding progress for `generation` (none recorded yet: no vectors)."""
    if not generation.in_state:
        row = conn.execute(f"select count(*) from ({WANTED_DOCUMENTS}) as wanted").fetchone()
        return EmbeddingProgress(wanted=int(row[0]) if row else 0, embedded=0, terminal_failed=0)
    coverage = embedding_state.coverage(conn, generation.generation_id)
    wanted, embedded = coverage["wanted_documents"], coverage["embedded_documents"]
    assert isinstance(wanted, int) and isinstance(embedded, int)
    counts = embedding_state.state_counts(conn, generation.generation_id)
    return EmbeddingProgress(
        wanted=wanted, embedded=embedded, terminal_failed=counts["terminal_failed"]
    )


@task(cache_policy=NO_CACHE, persist_result=False)
def plan_build(force: bool) -> dict[str, Any]:
    """Decide: `build`, `publish` an already validated build (or, the pointer lost, the one
    the history records published), `skip` (nothing changed, or the operator rolled back
    from the build of these inputs), or `refuse` (validation refused a build of these
    inputs and would refuse it again: `refusal` says why).

    A build counts as one of the current inputs when its source watermark and generation
    are the state's and embedding has not left it behind (`EmbeddingProgress`); when the
    plan builds because embedding left the published build (or else the newest such
    build) behind, `coverage_behind` says which and by how much.
    """
    settings = get_settings()
    conn = open_database(str(settings.state_path), read_only=True)
    try:
        watermark = inputs.source_watermark(conn, COPIED_MARTS)
        generation = inputs.current_generation(settings, conn)
        progress = _embedding_progress(conn, generation)
        builds = history.list_builds(conn) if history.table_exists(conn) else []
    finally:
        conn.close()
    plan: dict[str, Any] = {
        "source_watermark": watermark,
        "generation_id": generation.generation_id,
        "wanted_documents": progress.wanted,
        "embedded_documents": progress.embedded,
        "action": "build",
    }
    published = current_artifact(settings)
    published_id = files.build_id_of(published) if published else None
    same_source = [
        build
        for build in builds
        if build["source_watermark"] == watermark
        and build["generation_id"] == generation.generation_id
    ]
    same_inputs = [build for build in same_source if not progress.leaves_behind(build)]
    servable = [build for build in same_inputs if _of_this_schema(settings, build["build_id"])]
    if force:
        return {**plan, "why": "asked to (--force-build)"}
    # The pointer itself lost: what the history records published is served again, as it
    # stood (a rollback still holds), where a build would republish the newest inputs,
    # rolled back from or not, after minutes of building at 1M messages.
    pointer_lost = published is None and current_target(settings.artifact_path) is None
    recorded = _recorded_published(settings, builds) if pointer_lost else None
    if recorded is not None:
        return {**plan, "action": "publish", "build_id": recorded, "pointer_lost": True}
    if published_id and any(build["build_id"] == published_id for build in servable):
        damage = _broken_seal(settings, published_id, published)
        if damage is not None:
            return {**plan, "published_damaged": damage}
        return {**plan, "action": "skip", "build_id": published_id}
    rolled_back_from = _rolled_back_from(settings, builds, published_id, same_inputs)
    if rolled_back_from:
        return {
            **plan,
            "action": "skip",
            "build_id": published_id,
            "rolled_back_from": rolled_back_from,
            # Retention may have removed it since (after a second rollback).
            "rolled_back_from_kept": files.artifact_file(
                settings.artifact_path, rolled_back_from
            ).is_file(),
        }
    for build in servable:
        path = files.artifact_file(settings.artifact_path, build["build_id"])
        # `validated` is never published; one that was stays for an operator to publish.
        if build["status"] == "validated" and path.is_file():
            return {**plan, "action": "publish", "build_id": build["build_id"]}
    refused = _standing_refusal(settings, same_inputs)
    if refused:
        return {
            **plan,
            "action": "refuse",
            "build_id": refused["build_id"],
            "refusal": refused["error_message"],
        }
    behind = [
        build
        for build in same_source
        if build["status"] in history.SEALED
        and progress.leaves_behind(build)
        and _of_this_schema(settings, build["build_id"])
    ]
    if not behind:
        plan["why"] = _why_build(settings, builds, published_id, watermark, generation)
    else:  # newest first; the published one is the one search serves
        lagging = next((b for b in behind if b["build_id"] == published_id), behind[0])
        counts = lagging["counts_json"]
        plan["coverage_behind"] = {
            "build_id": lagging["build_id"],
            "vector_count": counts["vector_count"],
            "vector_coverage": schema.vector_coverage(
                counts["vector_count"], counts["message_count"]
            ),
            "embedding_finished": progress.finished,
            "coverage_step": COVERAGE_STEP,
        }
    return plan


def _why_build(
    settings: Settings,
    builds: list[dict[str, Any]],
    published_id: str | None,
    watermark: str,
    generation: inputs.Generation,
) -> str:
    """Why the current inputs need a build, said against what is published: a deployed
    run's log is the only place an operator reads it."""
    published = next((build for build in builds if build["build_id"] == published_id), None)
    if published_id is None:
        target = current_target(settings.artifact_path)
        if target is not None:  # `current_artifact` sees no file there
            return f"the published file {target} was missing"
        return "nothing was published before"
    if published is None:
        return f"{published_id}, published, has no record in this state database"
    if published["generation_id"] != generation.generation_id:
        return f"the embedding generation is not {published_id}'s"
    if published["source_watermark"] != watermark:
        return (
            f"the search documents changed since {published_id} (messages, members or the "
            "dbt models)"
        )
    if not _of_this_schema(settings, published_id):
        return f"{published_id} is of another artifact schema version"
    return f"no build of the current inputs is kept to publish in place of {published_id}"


def _broken_seal(settings: Settings, build_id: str, path: Path) -> str | None:
    """Why the published artifact no longer matches its seal (checksums, manifest), or
    None. A damaged one fails every process that opens it anew, while a running server
    answers from what it loaded before: it was kept as "nothing changed" until a restart."""
    return validate.seal_damage(settings.artifact_path.resolve(), build_id, path)


def _standing_refusal(
    settings: Settings, same_inputs: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The newest build of these inputs that validation refused, when a new build's
    validation would run as its did (`validate.same_checkpoint_inputs`), or None: it
    would only be refused again, after a full build (minutes at 1M messages)."""
    # Only a build that validation refused is recorded failed with a checkpoint result.
    refusals = [b for b in same_inputs if b["status"] == "failed" and b["validation_json"]]
    if refusals and validate.same_checkpoint_inputs(settings, refusals[0]["validation_json"]):
        return refusals[0]  # newest first
    return None


def _rolled_back_from(
    settings: Settings,
    builds: list[dict[str, Any]],
    published_id: str | None,
    same_inputs: list[dict[str, Any]],
) -> str | None:
    """The newest build of these inputs that was published, then replaced by an older
    build (an operator's rollback), or None; a published build serving refuses (another
    schema) holds no rollback."""
    published = next((build for build in builds if build["build_id"] == published_id), None)
    if published is None or not _of_this_schema(settings, published["build_id"]):
        return None
    for build in same_inputs:  # newest first
        if build["published_at"] is not None and build["started_at"] > published["started_at"]:
            return build["build_id"]
    return None


def _recorded_published(settings: Settings, builds: list[dict[str, Any]]) -> str | None:
    """The build the history records published, where its file is kept, of this schema and
    sound (a damaged one would fail every run's publish); else None."""
    recorded = next((build for build in builds if build["status"] == "published"), None)
    if recorded is None or not _of_this_schema(settings, recorded["build_id"]):
        return None
    path = files.artifact_file(settings.artifact_path, recorded["build_id"])
    if not path.is_file() or _broken_seal(settings, recorded["build_id"], path) is not None:
        return None
    return recorded["build_id"]


def _of_this_schema(settings: Settings, build_id: str) -> bool:
    """Whether the build's manifest records the artifact schema this code serves: serving
    refuses any other, so such a build is never kept or published again."""
    try:
        manifest = files.read_json(files.manifest_file(settings.artifact_path, build_id))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("schema_version") == schema.SCHEMA_VERSION


@task(cache_policy=NO_CACHE, persist_result=False)
def build_candidate() -> str:
    """Build a new artifact; the GX checkpoint validates it in a fresh read-only process."""
    return build_artifact(get_settings())


@task(cache_policy=NO_CACHE, persist_result=False)
def publish_candidate(build_id: str) -> dict[str, Any]:
    """Swap `current` to the validated build and apply retention."""
    return publish(get_settings(), build_id)


@task(cache_policy=NO_CACHE, persist_result=False)
def record_published() -> list[str]:
    """When nothing is published: record the pointer's build published in the history and
    remove what killed builds left; the names removed."""
    return record_pointer(get_settings())


@dataclass(frozen=True)
class ReconcileSteps:
    """The steps of one reconcile: the flow runs them as Prefect tasks, a plain run bare."""

    project_documents: Callable[[bool], dict[str, Any]]
    embed_documents: Callable[[], dict[str, Any]]
    plan_build: Callable[[bool], dict[str, Any]]
    build_candidate: Callable[[], str]
    publish_candidate: Callable[[str], dict[str, Any]]
    record_published: Callable[[], list[str]]

    def naming_failures(self) -> "ReconcileSteps":
        """The same steps, each failure carrying a note that names its step (PEP 678): the
        CLI shows it after the error's line, a traceback under it. A dbt failure reads the
        same in the projection and in the build's index; the exception's type and message
        stay what callers match on."""
        return ReconcileSteps(
            **{
                field.name: _noting_failures(STEP_NAMES[field.name], getattr(self, field.name))
                for field in fields(self)
            }
        )


# What a failure's note calls each step: "reconcile stopped while <name>".
STEP_NAMES = {
    "project_documents": "projecting the canonical store with dbt",
    "embed_documents": "embedding",
    "plan_build": "planning the build",
    "build_candidate": "building a new artifact",
    "publish_candidate": "validating and publishing it",
    "record_published": "recording the published build",
}


def _noting_failures(name: str, step: Callable[..., Any]) -> Callable[..., Any]:
    """`step`, whose exceptions (Ctrl-C and SIGTERM included) get the note naming it."""

    def noted(*args: Any) -> Any:
        try:
            return step(*args)
        except BaseException as error:
            error.add_note(f"reconcile stopped while {name}")
            raise

    return noted


def _run(
    steps: ReconcileSteps,
    logger: logging.Logger | logging.LoggerAdapter,
    full_refresh: bool,
    force_build: bool,
) -> dict[str, Any]:
    """One reconcile, whichever engine runs the steps."""
    settings = get_settings()
    steps = steps.naming_failures()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(
                files.pipeline_lock(settings.home, files.holder_name("a reconcile"))
            )
        except SlackqueryError as error:
            logger.warning("%s; skipping this run", error)
            return {"status": "skipped", "reason": str(error)}
        projected = steps.project_documents(full_refresh)
        embedded = steps.embed_documents()
        plan = steps.plan_build(force_build)
        logger.info("plan: %s", plan)
        result: dict[str, Any] = {"projection": projected, "embedding": embedded, "plan": plan}
        if plan["action"] == "skip":
            result.update(
                status="unchanged", build_id=plan["build_id"], removed=steps.record_published()
            )
            return result
        if plan["action"] == "refuse":
            steps.record_published()
            raise validate.ValidationFailed(_refused_again(plan))
        build_id = plan["build_id"] if plan["action"] == "publish" else steps.build_candidate()
        result["publish"] = steps.publish_candidate(build_id)
        result.update(status="published", build_id=build_id)
        return result


@flow(name="reconcile", log_prints=False)
def reconcile(
    full_refresh: bool = False,
    force_build: bool = False,
    dask_workers: int | None = None,
    dask_address: str | None = None,
) -> dict[str, Any]:
    """Bring the published artifact up to date with the canonical store, once.

    `dask_workers` / `dask_address` run the embed subflow's batches on Dask (see
    flows/embed.py); by default they run in this process.
    """
    tasks = ReconcileSteps(
        project_documents,
        with_dask(dask_workers, dask_address),
        plan_build,
        build_candidate,
        publish_candidate,
        record_published,
    )
    logger = get_run_logger()
    result = _run(tasks, logger, full_refresh, force_build)
    logger.info(summary(result))  # what the run did, in the run's log (the CLI prints it)
    return result


def reconcile_plain(
    full_refresh: bool = False, force_build: bool = False, progress: bool = False
) -> dict[str, Any]:
    """The same run as plain Python: what `slackquery reconcile` does without a Prefect API.

    `progress` (a terminal's run) draws the projection's and the embedding's bars and names
    the build and the publish on stderr as they start: each takes minutes on a large archive."""
    settings = get_settings()
    bare = ReconcileSteps(
        lambda refresh: project_documents.fn(refresh, progress),
        lambda: embed_pending(settings, progress=progress),
        plan_build.fn,
        _announced(STEP_NAMES["build_candidate"], build_candidate.fn, progress),
        _announced(STEP_NAMES["publish_candidate"], publish_candidate.fn, progress),
        record_published.fn,
    )
    return _run(bare, logging.getLogger("slackquery.reconcile"), full_refresh, force_build)


def _announced(what: str, step: Callable[..., Any], shown: bool) -> Callable[..., Any]:
    """`step`, which first says on stderr that it starts when progress is `shown`."""
    if not shown:
        return step

    def announced(*args: Any) -> Any:
        print(f"reconcile: {what}…", file=sys.stderr, flush=True)
        return step(*args)

    return announced


def _refused_again(plan: dict[str, Any]) -> str:
    """The one line a run fails with when it builds nothing for a standing refusal."""
    return (
        f"not building again: build {plan['build_id']}, of these same inputs, was refused "
        f"({plan['refusal']}) and nothing it was checked against has changed; new input "
        "builds again, and `slackquery reconcile --force-build` retries these inputs (once "
        "the cause is fixed, or if it was transient)"
    )


def summary(result: dict[str, Any]) -> str:
    """One line saying what the run did."""
    status = result["status"]
    if status == "skipped":
        return f"reconcile skipped: {result['reason']}"
    plan = result["plan"]
    if status == "unchanged" and plan.get("rolled_back_from"):
        rolled_back_from = plan["rolled_back_from"]
        again = (
            f"`slackquery publish {rolled_back_from}` serves it again"
            if plan["rolled_back_from_kept"]
            else "retention has removed it; `slackquery reconcile --force-build` builds them again"
        )
        return (
            f"reconcile: nothing changed; {result['build_id']} stays published (rolled back "
            f"from {rolled_back_from}, built from the current inputs; {again})"
        )
    if status == "unchanged":
        return f"reconcile: nothing changed; {result['build_id']} stays published"
    if plan.get("pointer_lost"):
        return (
            f"reconcile: published {result['build_id']} again: artifacts/current.duckdb was "
            "lost, and the build history records it as the published build"
        )
    if plan["action"] == "publish":
        return f"reconcile: published {result['build_id']}, already built from the current inputs"
    if plan.get("published_damaged"):
        return (
            f"reconcile: built and published {result['build_id']} in place of the published "
            f"artifact, which is damaged ({plan['published_damaged']})"
        )
    behind = plan.get("coverage_behind")
    if behind:
        wanted, embedded = plan["wanted_documents"], plan["embedded_documents"]
        if not behind["embedding_finished"]:
            why = f"embedding gained at least {behind['coverage_step']:.0%} of the messages"
        elif embedded < wanted:
            why = "embedding has finished but for terminal_failed messages"
        else:
            why = "embedding has finished"
        return (
            f"reconcile: built and published {result['build_id']}: {why}; "
            f"{embedded}/{wanted} messages have a vector ({embedded / wanted:.1%}), "
            f"against {behind['vector_count']} ({behind['vector_coverage']:.1%}) "
            f"in {behind['build_id']}"
        )
    return f"reconcile: built and published {result['build_id']}: {plan['why']}"
