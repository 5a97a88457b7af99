"""slackquery.projection and `slackquery project`: guards, errors, CLI, FTS macro."""

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
import yaml

from slackquery import cli, projection
from slackquery.artifacts.inputs import require_marts
from slackquery.errors import SlackqueryError
from slackquery.projection import (
    PROFILES_DIR,
    PROJECT_DIR,
    _raise_for_failure,
    fts_config,
    last_projection,
    project,
    project_fingerprint,
    warned_tests,
)
from tests.models.canonical_fixture import build_canonical
from tests.models.conftest import Projected, settings_for

ROOT = Path(__file__).resolve().parents[2]
# Where the unit tests of dbt's failures say its log is.
LOG = Path("/home/logs/dbt/dbt.log")


def test_missing_canonical_is_a_clear_error(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    with pytest.raises(SlackqueryError, match="canonical database not found"):
        project(settings)


def test_wrong_schema_version_is_refused(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    build_canonical(settings.canonical_path, schema_version=1)
    with pytest.raises(SlackqueryError, match="schema version 1; projection needs 2"):
        project(settings)


def _rename_table(canonical: Path, old: str, new: str) -> None:
    connection = duckdb.connect(str(canonical))
    try:
        connection.execute(f"alter table {old} rename to {new}")
    finally:
        connection.close()


def test_a_failed_projection_is_recorded_and_the_next_rebuilds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(tmp_path)
    build_canonical(settings.canonical_path)
    _rename_table(settings.canonical_path, "files", "files_away")
    with pytest.raises(SlackqueryError, match=r"dbt (build|run) failed at model\.slackquery\."):
        project(settings, tests=False)
    _, outcome, failure = last_projection(settings.state_path) or (None, None, None)
    assert outcome == "failed" and failure and "model.slackquery." in failure

    # The models it did write may be half-updated: the next run rebuilds them all.
    _rename_table(settings.canonical_path, "files_away", "files")
    healed = project(settings, tests=False)
    assert healed["full_refresh_reason"] == "the last projection failed"
    assert last_projection(settings.state_path) == (project_fingerprint(), "succeeded", None)
    assert project(settings, tests=False)["full_refresh"] is False

    # Incremental filters notice changed inputs, not changed SQL.
    monkeypatch.setattr("slackquery.projection.project_fingerprint", lambda: "edited models")
    edited = project(settings, tests=False)
    assert edited["full_refresh_reason"] == "the models changed since the last projection"
    assert edited["documents"] == healed["documents"]


def test_a_dbt_run_it_did_not_start_is_rebuilt_over_and_refused_until_then(
    tmp_path: Path,
) -> None:
    # A model tried out with `dbt build` by hand, then undone: the next projection was
    # incremental, so the trial's rows stayed, and `build` published them.
    settings = settings_for(tmp_path)
    build_canonical(settings.canonical_path)
    project(settings)
    environment = {
        "SLACKQUERY_CANONICAL_DB": str(settings.canonical_path),
        "SLACKQUERY_STATE_DB": str(settings.state_path),
    }
    projection.run_dbt(
        settings,
        ["run", "--target", "state", "--select", "search_documents"],
        environment=environment,
        target_subdir="target",
    )
    with (
        duckdb.connect(str(settings.state_path), read_only=True) as state,
        pytest.raises(SlackqueryError, match=r"a `dbt run` that `slackquery project` did"),
    ):
        require_marts(state, ["search_documents"])

    rebuilt = project(settings, tests=False)
    assert re.fullmatch(
        r"a `dbt run` that `slackquery project` did not start \(.* UTC\) wrote the state "
        "since the last projection",
        rebuilt["full_refresh_reason"],
    )
    with duckdb.connect(str(settings.state_path), read_only=True) as state:
        require_marts(state, ["search_documents"])
    assert project(settings, tests=False)["full_refresh"] is False


def _failed_run(failure: SimpleNamespace) -> SimpleNamespace:
    """What dbt's runner returns when one of its results failed."""
    return SimpleNamespace(success=False, exception=None, result=SimpleNamespace(results=[failure]))


def test_a_failed_run_operation_is_one_line_without_a_node() -> None:
    # `dbt run-operation` (the artifact's FTS index) reports results that name no node.
    failure = SimpleNamespace(status="error", message="IO Error: No space left\non device")
    with pytest.raises(SlackqueryError) as raised:
        _raise_for_failure(_failed_run(failure), "run-operation build_fts_index", LOG)
    assert str(raised.value) == (
        "dbt run-operation build_fts_index failed: IO Error: No space left on device "
        "(dbt's log: /home/logs/dbt/dbt.log)"
    )


def test_a_compilation_error_is_one_line_without_dbts_macro_stack() -> None:
    said = (
        "Compilation Error in model search_documents (models/marts/search/search_documents.sql)"
        "\n  This model has an enforced contract that failed.\n\n"
        "  | column_name | definition_type | contract_type | mismatch_reason |\n\n"
        "  > in macro assert_columns_equivalent (macros/relations/column/columns_spec_ddl.sql)"
        "\n  > called by model search_documents (models/marts/search/search_documents.sql)"
    )
    node = SimpleNamespace(unique_id="model.slackquery.search_documents")
    failure = SimpleNamespace(status="error", message=said, node=node)
    with pytest.raises(SlackqueryError) as raised:
        _raise_for_failure(_failed_run(failure), "build", LOG)
    assert str(raised.value) == (
        "dbt build failed at model.slackquery.search_documents: Compilation Error in model "
        "search_documents (models/marts/search/search_documents.sql) This model has an "
        "enforced contract that failed. | column_name | definition_type | contract_type | "
        "mismatch_reason | (dbt's log: /home/logs/dbt/dbt.log)"
    )


def test_a_failed_data_test_names_the_query_of_its_rows_and_a_warned_one_is_said() -> None:
    # It said "Got 1932 results" and no more; a test at severity warn was not said at all.
    def result(status: str, name: str) -> SimpleNamespace:
        node = SimpleNamespace(
            unique_id=f"test.slackquery.{name}", compiled_path=f"/home/dbt/compiled/{name}.sql"
        )
        said = f"Got 3 results, configured to {status} if != 0"
        return SimpleNamespace(status=status, message=said, node=node)

    with pytest.raises(SlackqueryError) as raised:
        _raise_for_failure(_failed_run(result("fail", "not_null_x")), "build", LOG)
    assert str(raised.value) == (
        "dbt build failed at test.slackquery.not_null_x: Got 3 results, configured to fail if "
        "!= 0 (the rows it failed on: the query in /home/dbt/compiled/not_null_x.sql; "
        "dbt's log: /home/logs/dbt/dbt.log)"
    )
    ran = SimpleNamespace(results=[result("warn", "unique_y"), result("pass", "unique_z")])
    assert warned_tests(ran) == [
        {
            "test": "test.slackquery.unique_y",
            "message": "Got 3 results, configured to warn if != 0",
            "query": "/home/dbt/compiled/unique_y.sql",
        }
    ]


def test_an_error_before_any_node_ran_keeps_its_reason() -> None:
    # A Jinja error in a macro stops dbt while it parses: it said only "Compilation Error".
    said = "Compilation Error\n  unexpected '}', expected ')'\n    line 3\n  > in macro x"
    run = SimpleNamespace(success=False, exception=RuntimeError(said), result=None)
    with pytest.raises(SlackqueryError) as raised:
        _raise_for_failure(run, "build", LOG)
    assert str(raised.value) == (
        "dbt build failed: Compilation Error unexpected '}', expected ')' line 3 "
        "(dbt's log: /home/logs/dbt/dbt.log)"
    )


def test_ctrl_c_during_dbt_is_an_interrupt_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # dbt catches it: the run was a "dbt build failed: " with an empty reason, exit 1, after
    # dbt's traceback of it on the console.
    def ctrl_c_once_parsed(event: object) -> None:
        if event.info.name == "FoundStats":  # type: ignore[attr-defined]
            raise KeyboardInterrupt

    monkeypatch.setattr("slackquery.projection._crash_after_a_node", ctrl_c_once_parsed)
    settings = settings_for(tmp_path)
    build_canonical(settings.canonical_path)
    monkeypatch.setenv("SLACKQUERY_HOME", str(settings.home))
    monkeypatch.setenv("SLACKQUERY_CANONICAL_DB", str(settings.canonical_path))
    monkeypatch.setenv("SLACKQUERY_STATE_DB", str(settings.state_path))
    monkeypatch.setenv("SLACKQUERY_LOG_DIR", str(settings.log_path))
    capfd.readouterr()
    assert cli.main(["project"]) == 130
    assert capfd.readouterr() == ("", "error: interrupted\n")
    assert "KeyboardInterrupt" in (settings.log_path / "dbt" / "dbt.log").read_text("utf-8")


def test_state_of_an_older_version_is_rebuilt_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(tmp_path)
    build_canonical(settings.canonical_path)
    first = project(settings, tests=False)
    connection = duckdb.connect(str(settings.state_path))
    try:  # what a version before `has_link` became a mart column left behind
        connection.execute("alter table search_documents drop column has_link")
    finally:
        connection.close()
    capfd.readouterr()
    again = project(settings, tests=False)
    assert again["full_refresh"] is True
    assert capfd.readouterr().out == ""  # dbt's error lines stay off stdout (`--json`)
    assert again["documents"] == first["documents"]
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        columns = {row[0] for row in connection.execute("describe search_documents").fetchall()}
    finally:
        connection.close()
    assert "has_link" in columns


def test_cli_prints_counts_as_json(
    projected: Projected, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = projected.settings
    monkeypatch.setenv("SLACKQUERY_HOME", str(settings.home))
    monkeypatch.setenv("SLACKQUERY_CANONICAL_DB", str(settings.canonical_path))
    monkeypatch.setenv("SLACKQUERY_STATE_DB", str(settings.state_path))
    monkeypatch.setenv("SLACKQUERY_LOG_DIR", str(settings.log_path))
    assert cli.main(["project", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["documents"] == projected.result["documents"]
    assert printed["full_refresh"] is False
    # Models and data tests; the unit tests check SQL, not data, so they are left to CI.
    assert printed["dbt_nodes"]["model"] > 0 and printed["dbt_nodes"]["test"] > 0
    assert "unit_test" not in printed["dbt_nodes"]


def test_every_model_documents_each_of_its_columns_and_no_other(projected: Projected) -> None:
    # STYLE: every model and column has a description. A column added to a model but not
    # to its YAML went unnoticed (only search_documents enforces a contract).
    documented = {
        model["name"]: {column["name"]: column.get("description") for column in model["columns"]}
        for path in (ROOT / "models").rglob("*.yml")
        for model in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("models", [])
    }
    with duckdb.connect(str(projected.settings.state_path), read_only=True) as state:
        built: dict[str, list[str]] = {}
        for table, column in state.execute(
            "select table_name, column_name from duckdb_columns() where schema_name = 'main'"
        ).fetchall():
            built.setdefault(table, []).append(column)
    assert set(documented) == {path.stem for path in (ROOT / "models").rglob("*.sql")}
    assert set(documented) <= set(built)
    for model, columns in documented.items():
        assert sorted(columns) == sorted(built[model]), model
        assert all(columns.values()), f"{model}: a column without a description"


def test_no_dbt_log_stays_open_after_a_projection(projected: Projected) -> None:
    # A scheduled worker projects every quarter hour in one process; dbt itself keeps its
    # log file open until its next invocation.
    log_file = projected.settings.log_path / "dbt" / "dbt.log"
    assert log_file.exists()
    open_files = [os.readlink(fd) for fd in Path("/proc/self/fd").iterdir() if fd.is_symlink()]
    assert str(log_file) not in open_files


def test_the_shared_projection_ran_every_unit_test(projected: Projected) -> None:
    # dbt ignores a `unit_tests:` block nested under a model, without a warning: each
    # must stand at the top level of its file to run.
    declared = []
    for path in sorted(ROOT.glob("models/**/*.yml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        nested = [model["name"] for model in document.get("models", []) if "unit_tests" in model]
        assert not nested, f"{path}: unit_tests under {nested}"
        declared += document.get("unit_tests", [])
    assert projected.result["dbt_nodes"]["unit_test"] == len(declared) > 0


def test_cli_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["project", "--help"])
    out = capsys.readouterr().out
    assert "--full-refresh" in out and "tombstoned" in out


def test_fts_macro_indexes_an_artifact_table(tmp_path: Path) -> None:
    """The artifact build's call: run-operation build_artifact_fts_index on a candidate."""
    from dbt.cli.main import dbtRunner

    from slackquery.projection import _close_dbt_duckdb

    artifact = tmp_path / "candidate.duckdb"
    connection = duckdb.connect(str(artifact))
    connection.execute(
        "create table search_documents as select * from (values "
        "('d1', 'login failed SQLSTATE 28P01'), ('d2', 'ERR-42 after v2.3.1'), "
        "('d3', 'ping U024BE7LH')) as v(document_id, text_lexical)"
    )
    connection.close()
    arguments = {"artifact_path": str(artifact), "relation": "search_documents"}
    arguments |= {"id_column": "document_id", "text_column": "text_lexical"}
    try:
        result = dbtRunner().invoke(
            [
                "run-operation",
                "build_artifact_fts_index",
                "--args",
                json.dumps(arguments),
                "--project-dir",
                str(PROJECT_DIR),
                "--profiles-dir",
                str(PROFILES_DIR),
                "--target",
                "artifact",
                "--target-path",
                str(tmp_path / "target"),
                "--log-path",
                str(tmp_path / "logs"),
                "--quiet",
            ]
        )
    finally:
        _close_dbt_duckdb()
    assert result.success, result.exception
    connection = duckdb.connect(str(artifact), read_only=True)
    try:
        connection.execute("load fts")
        hits = {
            query: connection.execute(
                "select document_id from search_documents "
                "where fts_main_search_documents.match_bm25(document_id, ?) is not null",
                [query],
            ).fetchall()
            for query in ("28P01", "ERR-42", "v2.3.1", "u024be7lh")
        }
    finally:
        connection.close()
    assert hits == {
        "28P01": [("d1",)],
        "ERR-42": [("d2",)],
        "v2.3.1": [("d2",)],
        "u024be7lh": [("d3",)],
    }


def test_fts_config_is_the_contract() -> None:
    assert fts_config() == {
        "stemmer": "none",
        "stopwords": "none",
        "ignore": r"[^\p{L}\p{N}]+",
        "strip_accents": 1,
        "lower": 1,
    }
