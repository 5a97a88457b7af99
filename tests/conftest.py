"""Shared pytest fixtures: an isolated SLACKQUERY_HOME per test."""

import gc
import os
import pprint
import shutil
import signal
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Any

import pytest
from dbt.contracts.files import FileHash
from dbt.parser.manifest import ManifestLoader

from slackquery import duckdb_setup, projection
from slackquery.folders import make_folder
from slackquery.settings import Settings, get_settings

# A worker's heap after collection (every test module, GX, dbt, Prefect: 820,000 tracked
# objects) lives to the end of the run, and each full pass of Python's cyclic garbage
# collector walked all of it again. With that heap frozen and young objects collected
# every 10,000 allocations, not 700, the two workers of a whole run spent 19.5 s in the
# collector instead of 38.1 s (measured with `gc.callbacks`).
YOUNG_GENERATION_THRESHOLD = 10_000


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collection imported out of every later garbage collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *gc.get_threshold()[1:])


def run_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this run's shared by its pytest-xdist workers (each has a base folder of
    its own inside it), for what one worker derives and another may reuse."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder of built model graphs for the whole run: every test has a home of its
    own, and a model cached per home would load again in every test that embeds. (The
    cache is written for concurrent processes: each stored build is renamed into place.)"""
    folder = run_temp(tmp_path_factory) / "model-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLACKQUERY_MODEL_CACHE_DIR", str(folder))
        yield folder


# The environment variables profiles/profiles.yml reads a home's database paths from.
PROFILE_PATH_VARIABLES = ("SLACKQUERY_STATE_DB", "SLACKQUERY_CANONICAL_DB")


def _portable_profile_hash(build_state_check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """dbt's parse-state check with the folders of the profile's databases left out.

    dbt reparses the whole project when the profile's connection details change, and the
    projection's profile holds the home's paths. What the parse takes from them is the
    database names, the files' stems (`state`, `canonical`), which stay in the hash; their
    folders it never reads, so a parse made in one home is a sound start for another."""

    @wraps(build_state_check)
    def build(loader: Any) -> Any:
        check = build_state_check(loader)
        connection = pprint.pformat(sorted(loader.root_project.credentials.connection_info()))
        for name in PROFILE_PATH_VARIABLES:
            if os.environ.get(name):
                connection = connection.replace(str(Path(os.environ[name]).parent), name)
        check.profile_hash = FileHash.from_contents(connection)
        return check

    return build


@pytest.fixture(scope="session", autouse=True)
def dbt_parse_seed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """dbt parses the whole project in each new home, and nearly every test has a home of
    its own: a projection spent about 7 s of its 13 s parsing, the artifact build's FTS step
    about 2 s of its 2.3 s. One parse per dbt target serves every home: the first
    in-process run leaves its partial-parse file here, and a home without one starts from
    that copy, as a second run in one home would (dbt still re-checks every file against
    it). Commands run in a subprocess parse from scratch. Each worker keeps its own seed:
    shared by the run's workers, one written by a home of another shape (a fixture's, whose
    databases lie in other folders) made the other worker's homes parse from scratch."""
    seeds = tmp_path_factory.getbasetemp() / "dbt-parse"
    run_dbt = projection.run_dbt

    @wraps(run_dbt)
    def seeded_run_dbt(settings: Settings, args: list[str], **options: Any) -> Any:
        seed = seeds / options["target_subdir"] / "partial_parse.msgpack"
        parsed = settings.home / "dbt" / options["target_subdir"] / seed.name
        if seed.exists() and not parsed.exists():
            make_folder(parsed.parent)  # as `run_dbt` would: private
            shutil.copyfile(seed, parsed)
        try:
            return run_dbt(settings, args, **options)
        finally:
            if parsed.exists() and not seed.exists():
                seed.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(parsed, seed)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(projection, "run_dbt", seeded_run_dbt)
        patch.setattr(
            ManifestLoader,
            "build_manifest_state_check",
            _portable_profile_hash(ManifestLoader.build_manifest_state_check),
        )
        yield


class FakeClock:
    """A monotonic clock that only sleeping moves: a wait runs out without taking time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def lock_wait_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """A writer's wait for a database another process holds (`duckdb_setup.open_database`)
    runs on a fake clock: a test of a busy file gets its error at once, deterministically."""
    clock = FakeClock()
    monkeypatch.setattr(duckdb_setup, "_clock", clock)
    monkeypatch.setattr(duckdb_setup, "_sleep", clock.sleep)
    return clock


@pytest.fixture(autouse=True)
def no_stop_grace_left() -> Iterator[None]:
    """A command stopped in this process (`main` under a test) arms the kernel's alarm that
    ends a command stuck after a stop (`cli.STOP_GRACE_S`): here it must not end pytest."""
    yield
    signal.alarm(0)


@pytest.fixture
def cold_dbt_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of dbt's parsing itself: every target parses from scratch."""
    monkeypatch.setattr(projection, "run_dbt", projection.run_dbt.__wrapped__)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The common umask, under which a plain mkdir makes rwxr-xr-x folders."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


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
# projected fixture store, the Prefect test harness, which also keeps a server busy in the
# background). pytest-xdist builds a session fixture in every worker that runs a test
# using it; under `-n` (the Makefile's), the scheduler below sends each of these folders
# to one worker, which builds it once. The serving folder's pipeline is built once for all
# workers (`run_temp`; tests/serving/conftest.py), and its files are units of their own:
# as one unit it was the longest by minutes, and the run waited on it. Every other test is
# a unit of its own, balanced as xdist's default `--dist load` would. (xdist's own
# `loadgroup` marks do not reach its scheduler under pytest 9, which no longer reads
# `item._nodeid`.) The folders go out first, longest first (flows about 5 minutes, models
# 2): the run cannot end before its longest unit, and while they run the other worker
# builds the serving pipeline alone. Handed out by test count, as xdist does, two serving
# files went out first, and one worker waited about 35 s for the other's pipeline.
SHARED_FIXTURE_FOLDERS = ("tests/flows/", "tests/models/")
PER_FILE_FOLDERS = ("tests/serving/",)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Load balancing in which each shared-fixture folder is one unit of work (in place of
    the default `load`; another `--dist` mode is left as asked)."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = next((f for f in SHARED_FIXTURE_FOLDERS if nodeid.startswith(f)), None)
            if folder is None and nodeid.startswith(PER_FILE_FOLDERS):
                return nodeid.split("::")[0]
            return folder or nodeid

        def _assign_work_unit(self, node: Any) -> None:
            # The folders go first, in their order; the rest in xdist's (most tests first).
            for folder in reversed(SHARED_FIXTURE_FOLDERS):
                if folder in self.workqueue:
                    self.workqueue.move_to_end(folder, last=False)
            super()._assign_work_unit(node)

    return SharedFixtureScheduling(config, log)
