"""Shared pytest fixtures: an isolated SLACKQUERY_HOME per test."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from slackquery.settings import Settings, get_settings


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder of built model graphs for the whole run: every test has a home of its
    own, and a model cached per home would load again in every test that embeds."""
    folder = tmp_path_factory.getbasetemp() / "model-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLACKQUERY_MODEL_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh SLACKQUERY_HOME for one test; every derived path lives under it."""
    root = tmp_path / "home"
    monkeypatch.setenv("SLACKQUERY_HOME", str(root))
    for name in ("CANONICAL_DB", "STATE_DB", "ARTIFACT_DIR", "LOG_DIR"):
        monkeypatch.delenv(f"SLACKQUERY_{name}", raising=False)
    return root


@pytest.fixture
def settings(home: Path) -> Settings:
    """Settings pointing at the per-test home."""
    return get_settings()


# Folders whose tests share a session fixture that takes tens of seconds to build (the
# serving pipeline, the projected fixture store, the Prefect test harness, which also keeps
# a server busy in the background). pytest-xdist builds a session fixture in every worker
# that runs a test using it; under `-n` (the Makefile's), the scheduler below sends each of
# these folders to one worker, which builds it once. Every other test is a unit of its own,
# balanced as xdist's default `--dist load` would. (xdist's own `loadgroup` marks do not
# reach its scheduler under pytest 9, which no longer reads `item._nodeid`.)
SHARED_FIXTURE_FOLDERS = ("tests/serving/", "tests/models/", "tests/flows/")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Load balancing in which each shared-fixture folder is one unit of work (in place of
    the default `load`; another `--dist` mode is left as asked)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = next((f for f in SHARED_FIXTURE_FOLDERS if nodeid.startswith(f)), None)
            return folder or nodeid

    return SharedFixtureScheduling(config, log)
