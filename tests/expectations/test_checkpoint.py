"""The GX checkpoint passes a sound artifact (in chunks) and names what breaks a damaged one."""

import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from expectations.checkpoint import main, validate_artifact
from expectations.suites.artifact_metadata import DRIFT_RULE
from slackquery.artifacts import arrays, files, schema
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.validate import failure_summary
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


def _copied(artifact: Path, tmp_path: Path) -> Path:
    """A writable copy of the artifact and its arrays folder in `tmp_path`."""
    copy = tmp_path / artifact.name
    shutil.copy(artifact, copy)
    shutil.copytree(files.arrays_dir_of(artifact), files.arrays_dir_of(copy))
    for path in (copy, *files.arrays_dir_of(copy).iterdir()):
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return copy


def _damaged(artifact: Path, tmp_path: Path, sql: str) -> Path:
    copy = _copied(artifact, tmp_path)
    conn = connect(str(copy))
    try:
        conn.execute(sql)
    finally:
        conn.close()
    return copy


SKETCH_MATCHES = "each vector's sketch equals its document's in document_vectors"


def _failed(result: dict) -> set[tuple[str, str]]:
    return {(failure["suite"], failure["description"]) for failure in result["failures"]}


def test_sound_artifact_passes_in_chunks(artifact: Path) -> None:
    result = validate_artifact(artifact, chunk_rows=7)
    assert result["success"], result["failures"]
    assert result["suites"]["search_documents"]["batches"] == 10  # 65 rows / 7
    assert result["suites"]["document_vectors"]["batches"] == 9  # 59 rows / 7
    assert result["suites"]["vector_arrays"]["batches"] == 9  # 59 positions / 7
    assert result["suites"]["document_arrays"]["batches"] == 10  # 65 documents / 7
    assert result["suites"]["postings_arrays"]["batches"] == 1  # the sampled terms
    assert all(suite["seconds"] > 0 for suite in result["suites"].values())
    assert set(result["suites"]) == {
        "artifact_metadata",
        "search_documents",
        "document_vectors",
        "vector_arrays",
        "document_arrays",
        "postings_arrays",
        "vector_coverage",
        "workspaces",
        "channels",
        "users",
        "channel_members",
        "limited_accounts",
        "fts_main_search_documents",
    }


OLDER = schema.SCHEMA_VERSION - 1
DAMAGE: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "missing_vector": (
        "delete from document_vectors where document_id = "
        "(select min(document_id) from document_vectors)",
        {
            ("artifact_metadata", "vector_coverage = document_vectors rows / message documents"),
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
    "repeated_limited_account": (
        "insert into limited_accounts values ('W0', 'U1', 'guest'), ('W0', 'U1', 'guest')",
        {("limited_accounts", "one row per workspace and user")},
    ),
    "unknown_account_limit": (
        "insert into limited_accounts values ('W0', 'U1', 'visitor')",
        {("limited_accounts", "every limit is one serving knows (deactivated, guest)")},
    ),
    # An older version's artifact (a rollback target kept from before an upgrade): its
    # missing table crashed a suite; now the version is named first.
    "older_schema": (
        f"drop table limited_accounts; update artifact_metadata set schema_version = {OLDER}",
        {
            (
                "artifact_metadata",
                f"schema version {OLDER}; validation checks version {schema.SCHEMA_VERSION}: "
                "build and publish a new one",
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
            ("search_documents", "a message document has at most one vector"),
        },
    ),
    "sketch_changed": (
        "update document_vectors set vector_sketch = [0, 0, 0, 0] where document_id = "
        "(select max(document_id) from document_vectors)",
        {("vector_arrays", SKETCH_MATCHES)},
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
    named = {suite for suite, _ in expected}
    result = validate_artifact(_damaged(artifact, tmp_path, sql), only=named)
    assert not result["success"]
    assert expected <= _failed(result), result["failures"]
    assert all(failure["sample"] or failure["expectation"] for failure in result["failures"])


def test_a_table_of_other_columns_names_them(artifact: Path, tmp_path: Path) -> None:
    # Every row holds the table's signature: ten sample ids said nothing of what differs.
    sql = "alter table channels add column extra integer; alter table channels drop last_ts_us"
    result = validate_artifact(_damaged(artifact, tmp_path, sql), only={"channels"})
    (failure,) = [
        item
        for item in result["failures"]
        if (item["suite"], item["column"]) == ("channels", "schema_signature")
    ]
    assert failure["sample"] == ["not in schema.py: extra INTEGER", "missing: last_ts_us BIGINT"]


def _rewrite(folder: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    np.save(arrays.array_file(folder, name), change(np.load(arrays.array_file(folder, name))))


def _swap_first_two(values: np.ndarray) -> np.ndarray:
    return values[[1, 0, *range(2, len(values))]]


def _last_row_outside(rows: np.ndarray) -> np.ndarray:
    return np.r_[rows[:-1], 10**6]


def _first_byte_changed(data: np.ndarray) -> np.ndarray:
    """Another ASCII first byte (the fixture's first text starts with one)."""
    return np.r_[np.uint8(ord("~") if data[0] != ord("~") else ord("!")), data[1:]]


UNREADABLE = "the arrays folder beside the artifact opens, shapes agreeing"
REPLIES_INVERT_ROOTS = (
    "each root's replies are the rows naming it, ascending, in the root's channel"
)


def _first_vector_scaled(vectors: np.ndarray) -> np.ndarray:
    return np.r_[vectors[:1] * 1.01, vectors[1:]]


def _drop_last_position(folder: Path) -> None:
    for name in ("vectors", "vector_codes", "vector_nibbles", "vector_rows"):
        _rewrite(folder, name, lambda values: values[:-1])


def _first_nibble_changed(nibbles: np.ndarray) -> np.ndarray:
    return np.r_[nibbles[:1] ^ np.uint8(1), nibbles[1:]]


ARRAY_DAMAGE: dict[str, tuple[Callable[[Path], None], set[tuple[str, str]]]] = {
    "nibbles_changed": (
        lambda folder: _rewrite(folder, "vector_nibbles", _first_nibble_changed),
        {("vector_arrays", "sampled int4 nibbles are their int8 codes rounded, two per byte")},
    ),
    "swapped_vectors": (
        lambda folder: _rewrite(folder, "vectors", _swap_first_two),
        {
            ("vector_arrays", SKETCH_MATCHES),
            (
                "vector_arrays",
                "sampled int8 codes decode to their float32 vectors within half a "
                "quantisation step",
            ),
        },
    ),
    "vector_not_unit": (
        lambda folder: _rewrite(folder, "vectors", _first_vector_scaled),
        {
            ("vector_arrays", "vectors are unit norm within 1e-5"),
            ("vector_arrays", SKETCH_MATCHES),
            (
                "vector_arrays",
                "sampled int8 codes decode to their float32 vectors within half a "
                "quantisation step",
            ),
        },
    ),
    "rows_out_of_order": (
        lambda folder: _rewrite(folder, "vector_rows", _swap_first_two),
        {
            ("vector_arrays", "vector_rows strictly ascending"),
            ("vector_arrays", SKETCH_MATCHES),
        },
    ),
    "row_without_vector": (
        lambda folder: _rewrite(folder, "vector_rows", _last_row_outside),
        {
            (
                "vector_arrays",
                "each vector row is a search_documents row with a vector in document_vectors",
            ),
            ("vector_arrays", SKETCH_MATCHES),
        },
    ),
    "position_missing": (
        _drop_last_position,
        {
            ("vector_arrays", "vector array length equals artifact_metadata.vector_count"),
            ("vector_arrays", "as many array positions as document_vectors has rows"),
        },
    ),
    "file_missing": (
        lambda folder: arrays.array_file(folder, "vector_codes").unlink(),
        {
            (
                "vector_arrays",
                "the arrays folder beside the artifact opens: every .npy file present with "
                "its dtype, and their shapes agree",
            ),
            ("document_arrays", UNREADABLE),
            ("postings_arrays", UNREADABLE),
        },
    ),
    "posting_scores_changed": (
        lambda folder: _rewrite(folder, "postings.scores", lambda scores: scores * 1.01),
        {
            ("postings_arrays", "a sampled term's posting scores equal match_bm25's"),
            (
                "postings_arrays",
                "a sampled term's impact order is its postings by descending score",
            ),
        },
    ),
    "posting_rows_shifted": (
        lambda folder: _rewrite(folder, "postings.rows", lambda rows: rows + 1),
        {
            ("postings_arrays", "a sampled term's postings list the rows match_bm25 finds for it"),
            (
                "postings_arrays",
                "a sampled term's impact order is its postings by descending score",
            ),
        },
    ),
    "ts_us_changed": (
        lambda folder: _rewrite(folder, "ts_us", lambda ts_us: ts_us + 1),
        {
            (
                "document_arrays",
                "kind flags, ts_us, has_link, is_thread and filter codes equal the row's",
            )
        },
    ),
    "thread_keys_merged": (
        lambda folder: _rewrite(folder, "thread_keys", np.zeros_like),
        {("document_arrays", "thread keys are equal exactly when rows share a thread")},
    ),
    "context_members_changed": (
        lambda folder: _rewrite(folder, "context.rows", np.zeros_like),
        {("document_arrays", "a thread context's members are the rows of its message_ids")},
    ),
    "reply_roots_dropped": (
        lambda folder: _rewrite(folder, "reply_roots", lambda roots: np.full_like(roots, -1)),
        {
            ("document_arrays", "a reply's root row is the row of its thread_root_id, else -1"),
            ("document_arrays", REPLIES_INVERT_ROOTS),
        },
    ),
    "replies_reversed": (
        lambda folder: _rewrite(folder, "replies.rows", lambda rows: rows[::-1].copy()),
        {("document_arrays", REPLIES_INVERT_ROOTS)},
    ),
    "display_text_changed": (
        lambda folder: _rewrite(folder, "display.records.bytes", _first_byte_changed),
        {("document_arrays", "sampled rows' display columns equal the table's")},
    ),
}


# The suites that read the arrays folder; the tables' suites cannot see damage to it.
ARRAY_SUITES = {"vector_arrays", "document_arrays", "postings_arrays"}
# Three batches of the fixture's 65 documents: checks still meet batch edges, at a third
# of the GX runs of `chunk_rows=7` (each run costs ~70 ms per suite).
DAMAGE_CHUNK_ROWS = 30


@pytest.mark.parametrize("damage", sorted(ARRAY_DAMAGE))
def test_arrays_that_disagree_with_the_tables_fail(
    artifact: Path, tmp_path: Path, damage: str
) -> None:
    change, expected = ARRAY_DAMAGE[damage]
    copy = _copied(artifact, tmp_path)
    change(files.arrays_dir_of(copy))
    result = validate_artifact(copy, chunk_rows=DAMAGE_CHUNK_ROWS, only=ARRAY_SUITES)
    assert not result["success"]
    assert _failed(result) == expected, result["failures"]


def test_counts_that_do_not_add_up_say_what_they_came_to(artifact: Path, tmp_path: Path) -> None:
    # "channel message counts add up…, sample:" and every channel's id, but neither total.
    damaged = _damaged(artifact, tmp_path, "update channels set message_count = message_count + 3")
    result = validate_artifact(damaged, only={"channels"})
    channels = len(connect(str(artifact), read_only=True).execute("from channels").fetchall())
    assert (
        "channels: expect_column_values_to_be_between (channel message counts add up to "
        f"artifact_metadata.message_count): found {59 + 3 * channels}, expected 59, sample: "
    ) in failure_summary(result)


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
    # The refusal said what a drop must not pass, never how far it went.
    assert (
        f"artifact_metadata: expect_column_values_to_be_between (document count {DRIFT_RULE}): "
        "found 65, expected at least 500" in failure_summary(result)
    )
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


def _garbled(artifact: Path, tmp_path: Path) -> Path:
    """A copy of the artifact with every 4 KiB block after DuckDB's headers overwritten."""
    copy = _copied(artifact, tmp_path)
    with copy.open("r+b") as file:
        for offset in range(3 * 4096, copy.stat().st_size, 4096):
            file.seek(offset)
            file.write(bytes(range(256)) * 16)
    return copy


def test_a_previous_artifact_that_cannot_be_read_is_a_warning_not_a_crash(
    artifact: Path, tmp_path: Path
) -> None:
    # The published artifact the candidate would replace was damaged after its seal: the
    # candidate is validated on its own, as when nothing is published, and the result says
    # which comparisons were left out and why.
    previous = _garbled(artifact, tmp_path)
    result = validate_artifact(artifact, previous=previous, max_count_drift=0.5)
    assert result["success"], result["failures"]
    assert result["parameters"]["min_document_count"] == 0  # no baseline to drift from
    (warning,) = result["warnings"]
    assert re.fullmatch(
        f"the previously published artifact {re.escape(previous.name)} cannot be read "
        r"\(Corrupt database file: checksum mismatch in block at location \d+\); count drift "
        "and vector coverage were not compared with it",
        warning,
    ), warning
    assert validate_artifact(artifact)["warnings"] == []


def test_a_candidate_that_does_not_open_is_one_error_line_and_exit_2(
    artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = _garbled(artifact, tmp_path)
    assert main([str(candidate), "--output", str(tmp_path / "result.json")]) == 2
    assert not (tmp_path / "result.json").exists()
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert error.startswith(f"error: cannot open artifact {candidate}: Corrupt database file")


def test_suite_selection_runs_the_named_suites_and_refuses_unknown_names(
    artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = _damaged(artifact, tmp_path, "update search_documents set text_display = ' '")
    output = tmp_path / "result.json"
    assert (
        main([str(damaged), "--suite", "users", "--suite", "channels", "--output", str(output)])
        == 0
    )
    assert set(files.read_json(output)["suites"]) == {"users", "channels"}
    assert main([str(damaged), "--suite", "search_documents", "--output", str(output)]) == 1
    assert main([str(damaged), "--suite", "user", "--output", str(output)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: no suite named user; suites: artifact_metadata, ")
