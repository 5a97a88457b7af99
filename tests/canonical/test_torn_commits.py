"""An import killed while DuckDB writes its commit to the log: the part DuckDB 1.5.5 replays
(a large insert's row groups, without the run's `import_runs` row or its tombstones) is
refused to other writers and to the projection, and undone by the next import.

The kill is reproduced exactly, without timing: the import's commit goes through, the
database file, its log and the commit marker are copied as a kill at that instant would
leave them, and the log loses its last byte (the end of the commit's final entry), as a
write cut short does.
"""

import shutil
from pathlib import Path

import duckdb
import pytest

from slackquery.canonical import importer, store, torn_commits
from slackquery.canonical.importer import import_source
from slackquery.errors import SlackqueryError
from slackquery.projection import check_canonical
from slackquery.settings import Settings
from tests.canonical.conftest import default_members, query, write_export

# More than one DuckDB row group (122,880 rows), so the insert is written to the database
# file before the commit and the log holds only pointers to it.
PADDING_ROWS = 130_000
PADDING_SQL = f"""
insert into messages (
    message_key, workspace_id, channel_id, ts, ts_us, is_thread_parent, is_thread_reply,
    is_thread_broadcast, is_edited, is_deleted, is_bot, source_message_id, conversation_day,
    payload_hash, first_seen_run_id, latest_run_id, last_changed_at
)
select
    'T0TEST:C09:' || i, 'T0TEST', 'C09', i::varchar, i, false, false, false, false, false,
    false, 'T0TEST:C09:' || i, date '2020-01-01', 'padding', run_id, run_id, now()
from range({PADDING_ROWS}) as padding(i), (select max(run_id) as run_id from import_runs)
"""


class Killed(Exception):
    """Stands for the SIGKILL that ends the import right after its commit's log write."""


def _import_torn(settings: Settings, export: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Import `export` with a large insert added, as killed during its commit; its run id."""
    db = settings.canonical_path
    wal = db.with_name(db.name + ".wal")
    saved = db.parent / "at-kill"
    saved.mkdir()
    commit = importer._commit

    def commit_then_die(connection: duckdb.DuckDBPyConnection) -> None:
        connection.execute(PADDING_SQL)
        connection.execute("set wal_autocheckpoint = '1TB'")  # the log keeps the commit
        connection.execute("set auto_checkpoint_skip_wal_threshold = 1000000000")
        commit(connection)
        for path in (db, wal, torn_commits.marker(db)):
            shutil.copy(path, saved / path.name)
        raise Killed

    monkeypatch.setattr(importer, "_commit", commit_then_die)
    with pytest.raises(Killed):
        import_source(settings, export)
    monkeypatch.setattr(importer, "_commit", commit)
    for path in (db, torn_commits.marker(db)):
        shutil.copy(saved / path.name, path)
    wal.write_bytes((saved / wal.name).read_bytes()[:-1])
    return str(query(db, "select max(latest_run_id) from messages")[0][0])


def test_torn_import_is_refused_then_undone_by_importing_again(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = settings.canonical_path
    first = write_export(tmp_path / "Acme Slack export.zip", default_members())
    import_source(settings, first)
    members = default_members()
    members["general/2024-01-03.json"] = members["general/2024-01-03.json"][1:]
    (tmp_path / "later").mkdir()
    later = write_export(tmp_path / "later" / "Acme Slack export.zip", members)

    torn = _import_torn(settings, later, monkeypatch)

    # What DuckDB replays: every padding row, but neither the run's row nor its tombstone.
    assert query(db, "select count(*) from messages where latest_run_id = ?", [torn]) == [
        (PADDING_ROWS,)
    ]
    assert query(db, "select count(*) from import_runs where run_id = ?", [torn]) == [(0,)]
    assert query(db, "select count(*) from messages where is_deleted") == [(0,)]

    refusal = f"run {torn} of .*later.*import` on that input"
    with pytest.raises(SlackqueryError, match=refusal):
        store.open_store(db, settings.import_memory_limit).close()  # as `sync` opens it
    with pytest.raises(SlackqueryError, match=refusal):
        check_canonical(db)  # as `project` reads it

    report = import_source(settings, later)

    assert [warning["problem"] for warning in report["warnings"]] == [
        f"import run {torn} was cut off during its commit; its {PADDING_ROWS} partial rows "
        "were removed"
    ]
    assert report["counts"]["messages"]["tombstoned"] == 1
    assert query(db, "select count(*) from messages where channel_id = 'C09'") == [(0,)]
    assert query(db, "select count(*) from messages where is_deleted") == [(1,)]
    orphans = " union all ".join(
        f"select latest_run_id from {table}" for table in torn_commits.RUN_TABLES
    )
    assert query(
        db,
        f"select count(*) from ({orphans}) where latest_run_id not in "
        "(select run_id from import_runs)",
    ) == [(0,)]
    assert query(db, "select count(*) from import_runs where run_id = ?", [torn]) == [(0,)]
    assert query(db, "select count(*) from import_runs") == [(2,)]
    assert not torn_commits.marker(db).exists()


def test_a_commit_that_never_reached_the_log_leaves_nothing_to_refuse(
    settings: Settings, tmp_path: Path
) -> None:
    db = settings.canonical_path
    export = write_export(tmp_path / "Acme Slack export.zip", default_members())
    import_source(settings, export)
    torn_commits.mark(db, "20240101T000000000000Z-deadbeef", export)

    store.open_store(db, settings.import_memory_limit).close()

    assert not torn_commits.marker(db).exists()


def test_a_marker_of_a_commit_that_went_through_is_cleared(
    settings: Settings, tmp_path: Path
) -> None:
    # Killed between its commit and the marker's removal: the run is whole, nothing to undo.
    db = settings.canonical_path
    export = write_export(tmp_path / "Acme Slack export.zip", default_members())
    run_id = import_source(settings, export)["run_id"]
    torn_commits.mark(db, run_id, export)

    store.open_store(db, settings.import_memory_limit).close()

    assert not torn_commits.marker(db).exists()
    assert query(db, "select count(*) from import_runs where run_id = ?", [run_id]) == [(1,)]
