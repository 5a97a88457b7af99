"""Fixtures for artifact tests: settings with a pinned tiny embedding generation and a
synthetic state database (no canonical store, dbt projection or embedder involved)."""

import shutil
from pathlib import Path

import pytest

from slackquery.embedding import configured_identity
from slackquery.embedding.base import GenerationIdentity
from slackquery.settings import Settings, get_settings
from tests.artifacts.synthetic import synthesize_state

EMBEDDING_ENV = {
    "SLACKQUERY_EMBEDDING_MODEL": "test/tiny-hash",
    "SLACKQUERY_EMBEDDING_TRANSPORT": "openai",
    "SLACKQUERY_EMBEDDING_DIMENSION": "8",
    "SLACKQUERY_EMBEDDING_MODEL_REVISION": "r1",
    "SLACKQUERY_RETENTION_MIN_AGE_S": "0",
    "SLACKQUERY_RETAIN_ARTIFACTS": "1",
}


def pipeline_env(home: Path) -> dict[str, str]:
    """Environment for a test home (also handed to subprocesses)."""
    return {"SLACKQUERY_HOME": str(home), **EMBEDDING_ENV}


def apply_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> Settings:
    """Point settings at `home` with the tiny generation; return them."""
    for name in ("CANONICAL_DB", "STATE_DB", "ARTIFACT_DIR", "LOG_DIR"):
        monkeypatch.delenv(f"SLACKQUERY_{name}", raising=False)
    for name, value in pipeline_env(home).items():
        monkeypatch.setenv(name, value)
    return get_settings()


def copy_of_home(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings of a copy of the home `source` (built once per module), for one test to
    change."""
    copy = tmp_path / "home"
    shutil.copytree(source, copy, symlinks=True)
    return apply_env(monkeypatch, copy)


def identity_for(settings: Settings) -> GenerationIdentity:
    """The generation the settings pin (the build must pick the same one)."""
    identity = configured_identity(settings)
    assert identity is not None
    return identity


@pytest.fixture
def state_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings whose state DB holds 60 synthetic messages, all embedded."""
    settings = apply_env(monkeypatch, tmp_path / "home")
    synthesize_state(settings.state_path, identity_for(settings), messages=60)
    return settings
