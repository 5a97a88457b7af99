"""The GX checkpoint passes a sound artifact (in chunks) and names what breaks a damaged one."""

import shutil
import stat
from pathlib import Path

import pytest

from expectations.checkpoint import main, validate_artifact
from expectations.suites.artifact_metadata import DRIFT_RULE
from slackquery.artifacts import files
from slackquery.artifacts.build import build_artifact
from slackquery.duckdb_setup import connect
from tests.artifacts.conftest import apply_env, identity_for
from tests.artifacts.synthetic import synthesize_state


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact built from 60 synthetic messages, shared by this module's tests."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        settings = apply_env(monkeypatch, tmp_path_factory.mktemp("checkpoint") / "home")
        synthesize_state(settings.state_path, identity_for(settings), messages=60)
        build_id = build_artifact(settings)
        return files.artifact_file(settings.artifact_path, build_id)


def _damaged(artifact: Path, tmp_path: Path, sql: str) -> Path:
    copy = tmp_path / artifact.name
    shutil.copy(artifact, copy)
    copy.chmod(stat.S_IRUSR | stat.S_IWUSR)
    conn = connect(str(copy))
    try:
        conn.execute(sql)
    finally:
        conn.close()
    return copy


def _failed(result: dict) -> set[tuple[str, str]]:
    return {(failure["suite"], failure["description"]) for failure in result["failures"]}


def test_sound_artifact_passes_in_chunks(artifact: Path) -> None:
    result = validate_artifact(artifact, chunk_rows=7)
    assert result["success"], result["failures"]
    assert result["suites"]["search_documents"]["batches"] == 10  # 65 rows / 7
    assert result["suites"]["document_vectors"]["batches"] == 9  # 59 rows / 7
    assert set(result["suites"]) == {
        "artifact_metadata",
        "search_documents",
        "document_vectors",
        "workspaces",
        "channels",
        "users",
        "channel_members",
        "fts_main_search_documents",
    }


DAMAGE: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "missing_vector": (
        "delete from document_vectors where document_id = "
        "(select min(document_id) from document_vectors)",
        {
            ("search_documents", "every message document has exactly one vector"),
            ("document_vectors", "row count equals artifact_metadata.vector_count"),
        },
    ),
    "blank_text": (
        "update search_documents set text_display = '  ' where document_id = "
        "(select max(document_id) from search_documents)",
        {("search_documents", "no blank document text")},
    ),
    "memberless_private_channel": (
        "delete from channel_members where conversation_type <> 'public'",
        {
            (
                "channel_members",
                "every private channel, DM and group DM has at least one member",
            )
        },
    ),
    "unknown_member": (
        "update channel_members set is_workspace_user = false, is_external = false "
        "where user_id = (select min(user_id) from channel_members)",
        {
            (
                "channel_members",
                "member ids exist as users of the workspace or are recorded as external",
            )
        },
    ),
    "index_gap": (
        "delete from fts_main_search_documents.docs where docid = 0",
        {
            ("search_documents", "the FTS index covers every document"),
            ("fts_main_search_documents", "the index holds every document"),
        },
    ),
    "duplicate_vector": (
        "insert into document_vectors select * from document_vectors where document_id = "
        "(select min(document_id) from document_vectors)",
        {
            ("document_vectors", "one vector per document"),
            ("search_documents", "every message document has exactly one vector"),
        },
    ),
    "unlisted_author": (
        "delete from users where user_id = (select min(user_id) from users)",
        {("users", "every author of a document is listed (`from:@name` resolves them)")},
    ),
    "unlisted_workspace": (
        "delete from workspaces where workspace_id = (select min(workspace_id) from workspaces)",
        {("workspaces", "every document's workspace is listed")},
    ),
    "wrong_count": (
        "update artifact_metadata set document_count = document_count + 1",
        {
            ("artifact_metadata", "document_count = message_count + thread_context_count"),
            ("search_documents", "row count equals artifact_metadata.document_count"),
        },
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_is_caught_and_named(artifact: Path, tmp_path: Path, damage: str) -> None:
    sql, expected = DAMAGE[damage]
    result = validate_artifact(_damaged(artifact, tmp_path, sql))
    assert not result["success"]
    assert expected <= _failed(result), result["failures"]
    assert all(failure["sample"] or failure["expectation"] for failure in result["failures"])


def test_count_drift_against_previous_and_cli_exit_status(
    artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous = _damaged(
        artifact,
        tmp_path,
        "update artifact_metadata set document_count = 1000, message_count = 900",
    )
    result = validate_artifact(artifact, previous=previous, max_count_drift=0.5)
    assert _failed(result) == {
        ("artifact_metadata", f"document count {DRIFT_RULE}"),
        ("artifact_metadata", f"message count {DRIFT_RULE}"),
    }
    assert "SLACKQUERY_MAX_COUNT_DRIFT=1" in DRIFT_RULE
    assert validate_artifact(artifact, previous=previous, max_count_drift=1)["success"]
    output = tmp_path / "result.json"
    assert main([str(artifact), "--previous", str(previous), "--output", str(output)]) == 1
    assert main([str(artifact), "--output", str(output)]) == 0
    assert files.read_json(output)["success"]


@pytest.mark.parametrize(
    ("previous_documents", "previous_messages"),
    [
        (20, 20),  # the candidate (65 documents, 59 messages) has grown from a small archive
        (160, 150),  # more than half gone, but fewer than count_drift_min_drop (100)
    ],
)
def test_growth_and_small_absolute_drops_pass(
    artifact: Path, tmp_path: Path, previous_documents: int, previous_messages: int
) -> None:
    previous = _damaged(
        artifact,
        tmp_path,
        f"update artifact_metadata set document_count = {previous_documents}, "
        f"message_count = {previous_messages}",
    )
    result = validate_artifact(artifact, previous=previous, max_count_drift=0.5)
    assert result["success"], result["failures"]
