"""Shared pytest fixtures: an isolated SLACKQUERY_HOME per test."""

from pathlib import Path

import pytest

from slackquery.settings import Settings, get_settings


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
