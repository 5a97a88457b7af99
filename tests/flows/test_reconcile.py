"""The `reconcile` flow: build + publish once, skip when unchanged, one run at a time.

Projection and embedding are replaced by the synthetic state (their own tests cover
them); the build, validation and publish are real.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prefect import Flow

import flows.embed as embed_module
import flows.reconcile as reconcile_module
import slackquery.embedding.work as work
from flows.reconcile import (
    plan_build,
    reconcile,
    reconcile_plain,
)
from flows.reconcile import summary as reconcile_summary
from slackquery.artifacts import files, history
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.pointer import swap_current
from slackquery.artifacts.publish import current_artifact, publish, rollback
from slackquery.artifacts.validate import ValidationFailed
from slackquery.cli import main
from slackquery.duckdb_setup import connect
from slackquery.embedding.base import GenerationIdentity
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import embed_all, embed_only, synthesize_state


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    settings = apply_env(monkeypatch, tmp_path / "home")
    identity = identity_for(settings)
    calls: list[str] = []

    def fake_project(settings: Settings, **_options: bool) -> dict[str, Any]:
        calls.append("project")
        synthesize_state(settings.state_path, identity, messages=40, embed=True)
        return {"documents": 40}

    # The real embed step runs (the flow, or the plain loop), with nothing left to embed:
    # the synthetic state's vectors are already there, so the model is never called.
    monkeypatch.setattr(work, "build_embedder", lambda _settings: IdleEmbedder(identity))
    monkeypatch.setattr(reconcile_module, "project", fake_project)
    return settings


@dataclass
class IdleEmbedder:
    identity: GenerationIdentity


def test_deployed_reconcile_embeds_through_the_embed_flow(
    pipeline: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen: list[Flow] = []

    def spy(workers: int | None, address: str | None) -> Flow:
        chosen.append(embed_module.with_dask(workers, address))
        return chosen[-1]

    monkeypatch.setattr(reconcile_module, "with_dask", spy)
    result = reconcile()
    assert chosen == [embed_module.embed_flow]  # the flow object, with its task retries
    embedding = result["embedding"]
    assert embedding["generation_id"] == identity_for(pipeline).generation_id
    assert embedding["claimed"] == 0 and embedding["coverage"] == 1.0


def test_reconcile_publishes_then_skips_when_unchanged(
    pipeline: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="prefect.flow_runs")
    first = reconcile()
    assert first["status"] == "published"
    # The run's log names what it published (a deployment's only record of it).
    assert (
        f"reconcile: built and published {first['build_id']}: nothing was published before"
        in caplog.messages
    )
    assert (
        current_artifact(pipeline)
        == files.artifact_file(pipeline.artifact_path, first["build_id"]).resolve()
    )
    second = reconcile()
    assert second["status"] == "unchanged" and second["build_id"] == first["build_id"]

    with files.pipeline_lock(pipeline.home):
        assert reconcile()["status"] == "skipped"


def test_a_damaged_published_artifact_is_rebuilt(pipeline: Settings) -> None:
    # It stayed published as "nothing changed", served from a running server's cache, and
    # failed every new reader.
    first = reconcile_plain()
    damaged = files.artifact_file(pipeline.artifact_path, first["build_id"])
    damaged.chmod(0o644)
    with damaged.open("r+b") as file:
        file.seek(5 * 4096)
        file.write(bytes(4096))
    plan = plan_build.fn(False)
    assert plan["action"] == "build"
    assert plan["published_damaged"].startswith(f"checksum mismatch for {damaged.name}")
    rebuilt = reconcile_plain()
    assert rebuilt["status"] == "published" and rebuilt["build_id"] != first["build_id"]
    assert reconcile_summary(rebuilt).startswith(
        f"reconcile: built and published {rebuilt['build_id']} in place of the published "
        "artifact, which is damaged (checksum mismatch"
    )
    assert plan_build.fn(False)["action"] == "skip"
    # A published file gone from under its pointer: not "nothing was published".
    files.artifact_file(pipeline.artifact_path, rebuilt["build_id"]).unlink()
    gone = plan_build.fn(False)
    assert gone["action"] == "build"
    assert gone["why"] == f"the published file search-{rebuilt['build_id']}.duckdb was missing"


def test_a_build_of_another_schema_version_is_rebuilt(pipeline: Settings) -> None:
    first = reconcile_plain()
    manifest_path = files.manifest_file(pipeline.artifact_path, first["build_id"])
    manifest = files.read_json(manifest_path)
    manifest_path.chmod(0o644)
    # What an upgrade looks like: the published build's schema is one serving refuses now.
    manifest_path.write_text(json.dumps({**manifest, "schema_version": 0}), encoding="utf-8")
    plan = plan_build.fn(False)
    assert plan["action"] == "build"
    manifest_path.unlink()  # no manifest at all: nothing says it can be served
    assert plan_build.fn(False)["action"] == "build"


def test_a_membership_change_alone_is_built_again(pipeline: Settings) -> None:
    # It changes no search document: reconcile said "nothing changed" and kept serving
    # the old members, so a user removed from a private channel went on reading it.
    published = reconcile_plain()["build_id"]
    with connect(str(pipeline.state_path)) as state:
        (members,) = state.execute("select count(*) from search_channel_members").fetchone()
        state.execute("delete from search_channel_members where rowid = 0")
    assert members > 0
    plan = plan_build.fn(False)
    assert plan["action"] == "build" and published not in plan.get("build_id", "")


def test_plan_publishes_a_validated_build_instead_of_rebuilding(pipeline: Settings) -> None:
    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=40)
    build_id = build_artifact(pipeline)  # validated, never published (a killed run)
    plan = plan_build.fn(False)
    assert plan["action"] == "publish" and plan["build_id"] == build_id
    assert plan_build.fn(True)["action"] == "build"


def test_plan_never_publishes_a_build_again_that_was_published_before(
    pipeline: Settings,
) -> None:
    earlier = reconcile_plain()["build_id"]
    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=30)
    publish(pipeline, build_artifact(pipeline))  # other inputs, published after `earlier`
    # The inputs are `earlier`'s again (say, a model switched back): `earlier` was
    # published and replaced, so it is a rollback target for an operator, not for reconcile.
    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=40)
    assert _statuses(pipeline)[earlier] == "superseded"
    plan = plan_build.fn(False)
    assert plan["action"] == "build" and "build_id" not in plan


def test_plain_reconcile_runs_the_same_steps_without_prefect(
    pipeline: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    first = reconcile_plain()
    assert first["status"] == "published"
    assert (
        current_artifact(pipeline)
        == files.artifact_file(pipeline.artifact_path, first["build_id"]).resolve()
    )
    assert main(["reconcile", "--engine", "plain", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["status"] == "unchanged" and again["build_id"] == first["build_id"]
    with files.pipeline_lock(pipeline.home):
        assert reconcile_plain()["status"] == "skipped"


def _statuses(settings: Settings) -> dict[str, str]:
    conn = connect(str(settings.state_path), read_only=True)
    try:
        return {row["build_id"]: row["status"] for row in history.list_builds(conn)}
    finally:
        conn.close()


def test_a_rollback_holds_until_new_input_gives_a_new_build(
    pipeline: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=30)
    older = build_artifact(pipeline)
    publish(pipeline, older)
    assert main(["reconcile", "--engine", "plain"]) == 0  # projects the current 40 messages
    current = current_artifact(pipeline)
    newer = files.build_id_of(current) if current else None
    assert newer != older
    # It did not say why it built.
    assert capsys.readouterr().out == (
        f"reconcile: built and published {newer}: the search documents changed since {older} "
        "(messages, members or the dbt models)\n"
    )

    rollback(pipeline, older)  # the operator steps back from the newer build
    assert main(["reconcile", "--engine", "plain"]) == 0
    assert capsys.readouterr().out == (
        f"reconcile: nothing changed; {older} stays published (rolled back from {newer}, "
        f"built from the current inputs; `slackquery publish {newer}` serves it again)\n"
    )
    assert current_artifact(pipeline) == files.artifact_file(pipeline.artifact_path, older)
    assert _statuses(pipeline) == {older: "published", newer: "superseded"}
    # Once retention has removed it (after a second rollback), publishing it cannot work.
    files.artifact_file(pipeline.artifact_path, newer).unlink()
    assert main(["reconcile", "--engine", "plain"]) == 0
    assert capsys.readouterr().out.endswith(
        f"(rolled back from {newer}, built from the current inputs; retention has removed it; "
        "`slackquery reconcile --force-build` builds them again)\n"
    )
    assert current_artifact(pipeline) == files.artifact_file(pipeline.artifact_path, older)

    def grown_project(settings: Settings, **_options: bool) -> dict[str, Any]:
        return synthesize_state(settings.state_path, identity_for(settings), messages=50)

    monkeypatch.setattr(reconcile_module, "project", grown_project)
    result = reconcile_plain()  # new input: a new build, published as usual
    assert result["status"] == "published" and result["build_id"] not in (older, newer)


def test_a_lost_pointer_is_set_again_to_the_published_build_and_a_rollback_holds(
    pipeline: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # With current.duckdb removed after a rollback, the next run built the inputs rolled
    # back from and published them, saying "nothing was published before".
    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=30)
    older = build_artifact(pipeline)
    publish(pipeline, older)
    newer = reconcile_plain()["build_id"]  # the current 40 messages
    rollback(pipeline, older)
    pointer = pipeline.artifact_path / files.CURRENT_NAME
    pointer.unlink()

    assert main(["reconcile", "--engine", "plain"]) == 0
    assert capsys.readouterr().out == (
        f"reconcile: published {older} again: artifacts/current.duckdb was lost, and the "
        "build history records it as the published build\n"
    )
    assert current_artifact(pipeline) == files.artifact_file(pipeline.artifact_path, older)
    assert _statuses(pipeline) == {older: "published", newer: "superseded"}  # nothing built
    again = reconcile_plain()
    assert again["status"] == "unchanged" and again["plan"]["rolled_back_from"] == newer

    # Damaged, or without its file, there is nothing to point at: the inputs are built.
    pointer.unlink()
    damaged = files.artifact_file(pipeline.artifact_path, older)
    damaged.chmod(0o644)
    with damaged.open("r+b") as file:
        file.seek(damaged.stat().st_size // 2)
        file.write(b"damaged")
    rebuilt = reconcile_plain()
    assert rebuilt["status"] == "published" and rebuilt["build_id"] not in (older, newer)
    assert rebuilt["plan"]["why"] == "nothing was published before"
    pointer.unlink()
    files.artifact_file(pipeline.artifact_path, rebuilt["build_id"]).unlink()
    assert reconcile_plain()["plan"]["why"] == "nothing was published before"


def _shrunk_project(settings: Settings, **_options: bool) -> dict[str, Any]:
    """A projection down to 10 of the 40 messages: count drift, past any floor of 0."""
    return synthesize_state(settings.state_path, identity_for(settings), messages=10)


def test_a_refusal_holds_until_the_inputs_or_what_they_are_checked_against_change(
    pipeline: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every scheduled run built and validated the refused inputs again, only to be refused
    # again, and recorded one more failed build.
    monkeypatch.setenv("SLACKQUERY_COUNT_DRIFT_MIN_DROP", "0")
    published = reconcile_plain()["build_id"]
    monkeypatch.setattr(reconcile_module, "project", _shrunk_project)
    assert main(["reconcile", "--engine", "plain"]) == 1
    said = capsys.readouterr().err
    assert "validation failed" in said
    assert said.endswith("; reconcile stopped while building a new artifact\n")
    (refused,) = set(_statuses(pipeline)) - {published}

    plan = plan_build.fn(False)
    assert plan["action"] == "refuse" and plan["build_id"] == refused
    assert plan["refusal"].startswith("validation failed: ")
    assert main(["reconcile", "--engine", "plain"]) == 1
    assert capsys.readouterr().err == (
        f"error: not building again: build {refused}, of these same inputs, was refused "
        f"({plan['refusal']}) and nothing it was checked against has changed; new input "
        "builds again, and `slackquery reconcile --force-build` retries these inputs (once "
        "the cause is fixed, or if it was transient)\n"
    )
    with pytest.raises(ValidationFailed, match=f"not building again: build {refused}"):
        reconcile()  # a deployment's run fails too, as the refusal itself did
    assert _statuses(pipeline) == {published: "published", refused: "failed"}
    assert plan_build.fn(True)["action"] == "build"  # --force-build retries them
    assert plan_build.fn(True)["why"] == "asked to (--force-build)"

    synthesize_state(pipeline.state_path, identity_for(pipeline), messages=11)
    assert plan_build.fn(False)["action"] == "build"  # new input
    monkeypatch.setenv("SLACKQUERY_MAX_COUNT_DRIFT", "1")  # the operator accepts the drop
    result = reconcile_plain()  # the refused inputs again, checked against another setting
    assert result["status"] == "published" and result["build_id"] not in (published, refused)


def test_a_run_with_nothing_to_publish_records_the_pointers_build(pipeline: Settings) -> None:
    first = reconcile_plain()["build_id"]
    second = build_artifact(pipeline)  # the same inputs, as `--force-build` builds them
    # What a publish killed right after swapping the pointer leaves: the history behind.
    swap_current(pipeline.artifact_path, files.artifact_file(pipeline.artifact_path, second).name)
    again = reconcile_plain()
    assert again["status"] == "unchanged" and again["build_id"] == second
    assert _statuses(pipeline) == {first: "superseded", second: "published"}


@dataclass
class PartialEmbedding:
    """40 active messages, of which embedding has reached the first `count` (by id): each
    reconcile's embed step gets as far as the test has set `count`."""

    settings: Settings
    count: int

    def embed(self) -> dict[str, Any]:
        conn = connect(str(self.settings.state_path))
        try:
            embed_all(conn, identity_for(self.settings))  # the same vectors every time
        finally:
            conn.close()
        embed_only(self.settings.state_path, self.count)
        return {"embedded_documents": self.count}

    def fail_the_rest(self) -> None:
        """The endpoint rejected every message not embedded yet: nothing is left to claim."""
        conn = connect(str(self.settings.state_path))
        try:
            conn.execute(
                "update embedding_work_items set state = 'terminal_failed' where state = 'pending'"
            )
        finally:
            conn.close()


@pytest.fixture
def partly_embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PartialEmbedding:
    # README: lower the coverage gate to publish while embedding is still going on.
    monkeypatch.setenv("SLACKQUERY_ARTIFACT_MIN_VECTOR_COVERAGE", "0.1")
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=40)
    embedding = PartialEmbedding(settings, count=8)  # 20%
    embedding.embed()
    monkeypatch.setattr(reconcile_module, "project", lambda _settings, **_options: {})
    monkeypatch.setattr(
        reconcile_module, "embed_pending", lambda _settings, **_options: embedding.embed()
    )
    return embedding


def _vector_coverage(settings: Settings, build_id: str) -> float:
    manifest = files.read_json(files.manifest_file(settings.artifact_path, build_id))
    return manifest["vector_coverage"]


def test_reconcile_rebuilds_a_partly_embedded_artifact_once_embedding_finishes(
    partly_embedded: PartialEmbedding, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = partly_embedded.settings
    first = reconcile_plain()
    assert first["status"] == "published"
    assert _vector_coverage(settings, first["build_id"]) == 0.2
    partly_embedded.count = 11  # 27.5%, still embedding: too small a gain to rebuild for
    again = reconcile_plain()
    assert again["status"] == "unchanged" and again["build_id"] == first["build_id"]

    partly_embedded.count = 40  # embedding has caught up: the source itself is unchanged
    assert main(["reconcile", "--engine", "plain"]) == 0
    current = current_artifact(settings)
    newer = files.build_id_of(current) if current else None
    assert newer not in (None, first["build_id"])
    assert capsys.readouterr().out == (
        f"reconcile: built and published {newer}: embedding has finished; 40/40 messages "
        f"have a vector (100.0%), against 8 (20.0%) in {first['build_id']}\n"
    )
    assert _vector_coverage(settings, newer) == 1.0
    last = reconcile_plain()
    assert last["status"] == "unchanged" and last["build_id"] == newer


def test_plan_rebuilds_for_a_coverage_step_or_once_nothing_is_left_to_embed(
    partly_embedded: PartialEmbedding,
) -> None:
    settings = partly_embedded.settings
    published = reconcile_plain()["build_id"]  # 8 of 40
    partly_embedded.count = 11
    partly_embedded.embed()
    plan = plan_build.fn(False)
    assert plan["action"] == "skip" and plan["build_id"] == published
    assert (plan["embedded_documents"], plan["wanted_documents"]) == (11, 40)

    partly_embedded.fail_the_rest()  # 11 embedded, 29 terminal_failed: embedding is done
    plan = plan_build.fn(False)
    assert plan["action"] == "build"
    assert plan["coverage_behind"] == {
        "build_id": published,
        "vector_count": 8,
        "vector_coverage": 0.2,
        "embedding_finished": True,
        "coverage_step": 0.1,
    }

    partly_embedded.count = 12  # pending again, 4 more than published: the 10% step
    result = reconcile_plain()
    assert result["status"] == "published" and result["build_id"] != published
    assert reconcile_summary(result) == (
        f"reconcile: built and published {result['build_id']}: embedding gained at least "
        f"10% of the messages; 12/40 messages have a vector (30.0%), against 8 (20.0%) "
        f"in {published}"
    )

    # A validated build of these inputs that embedding has left behind is not published:
    # reconcile builds again, and says how far the published one is behind.
    partly_embedded.count = 14
    partly_embedded.embed()
    validated = build_artifact(settings)  # 14 vectors, never published
    partly_embedded.count = 40
    partly_embedded.embed()
    plan = plan_build.fn(False)
    assert plan["action"] == "build"
    assert plan["coverage_behind"]["build_id"] == result["build_id"]
    assert plan["coverage_behind"]["vector_count"] == 12
    assert _statuses(settings)[validated] == "validated"


def test_a_refusal_of_a_partly_embedded_build_holds_until_embedding_moves_on(
    partly_embedded: PartialEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACKQUERY_COUNT_DRIFT_MIN_DROP", "0")
    settings = partly_embedded.settings
    reconcile_plain()  # 8 of 40 messages embedded
    _shrunk_project(settings)
    partly_embedded.count = 2
    with pytest.raises(ValidationFailed):
        reconcile_plain()
    assert plan_build.fn(False)["action"] == "refuse"
    partly_embedded.count = 10  # embedding has finished: the refused build lags behind
    partly_embedded.embed()
    assert plan_build.fn(False)["action"] == "build"


def test_a_failure_names_the_step_it_stopped_in(
    pipeline: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # "dbt … failed" read alike from the projection and from the build's index.
    def broken_project(settings: Settings, **_options: bool) -> dict[str, Any]:
        raise SlackqueryError("dbt run failed: boom")

    monkeypatch.setattr(reconcile_module, "project", broken_project)
    with pytest.raises(SlackqueryError) as raised:
        reconcile()  # the deployed flow: through a Prefect task run
    stopped = "reconcile stopped while projecting the canonical store with dbt"
    assert str(raised.value) == "dbt run failed: boom"
    assert raised.value.__notes__ == [stopped]
    assert main(["reconcile", "--engine", "plain"]) == 1
    assert capsys.readouterr().err == f"error: dbt run failed: boom; {stopped}\n"


def test_a_terminal_run_says_which_step_it_is_in(
    pipeline: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # It ran minutes without a word: the bars of `project` and `embed`, then each step.
    assert reconcile_plain(progress=True)["status"] == "published"
    said = capsys.readouterr().err
    assert "reconcile: building a new artifact…" in said
    assert said.index("building") < said.index("reconcile: validating and publishing it…")
    assert reconcile_plain()["status"] == "unchanged"
    assert "reconcile:" not in capsys.readouterr().err
