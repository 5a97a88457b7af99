"""One dbt build of the tiny canonical store per test session, shared by the model tests."""

import hashlib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from slackquery.projection import project
from slackquery.settings import Settings
from tests.models.canonical_fixture import build_canonical


@dataclass(frozen=True)
class Projected:
    """A projected workspace: its settings, the projection result and the canonical checksum."""

    settings: Settings
    result: dict
    canonical_sha256_before: str


def settings_for(home: Path) -> Settings:
    """Settings with every path under `home`, whatever SLACKQUERY_* the environment has."""
    return Settings(
        home=home,
        canonical_db=home / "canonical.duckdb",
        state_db=home / "state.duckdb",
        artifact_dir=home / "artifacts",
        log_dir=home / "logs",
    )


def file_sha256(path: Path) -> str:
    """Checksum of a file, to prove the canonical store is never written."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documents(settings: Settings) -> dict[str, dict]:
    """Every search document by id, each as a column -> value dict."""
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        cursor = connection.execute("select * from search_documents")
        names = [column[0] for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        connection.close()
    return {row["document_id"]: row for row in rows}


@pytest.fixture(scope="session")
def projected(tmp_path_factory: pytest.TempPathFactory) -> Projected:
    """The fixture canonical store, projected once (dbt build: models, data and unit tests)."""
    home = tmp_path_factory.mktemp("projection")
    settings = settings_for(home)
    build_canonical(settings.canonical_path)
    before = file_sha256(settings.canonical_path)
    result = project(settings, unit_tests=True)
    return Projected(settings=settings, result=result, canonical_sha256_before=before)
