"""The artifact build's FTS step: the dbt macro indexes each candidate file, and builds
after the first reuse dbt's partial parse."""

from pathlib import Path

import pytest

from slackquery import projection
from slackquery.artifacts import fts
from slackquery.duckdb_setup import connect
from slackquery.settings import Settings


def _candidate(path: Path, documents: list[tuple[str, str]]) -> Path:
    """A candidate file holding only the table the index is built on."""
    conn = connect(str(path))
    try:
        conn.execute("create table search_documents (document_id varchar, text_lexical varchar)")
        conn.executemany("insert into search_documents values (?, ?)", documents)
    finally:
        conn.close()
    return path


def _search(path: Path, query: str) -> tuple[dict, list[str]]:
    """The configuration compiled into the file's index, and the documents matching `query`."""
    conn = connect(str(path), read_only=True)
    try:
        config = fts.read_config(conn)
        rows = conn.execute(
            "select document_id from search_documents "
            "where fts_main_search_documents.match_bm25(document_id, ?) is not null",
            [query],
        ).fetchall()
    finally:
        conn.close()
    return config, [document_id for (document_id,) in rows]


@pytest.mark.usefixtures("cold_dbt_parse")
def test_each_build_indexes_its_own_file_and_the_second_skips_the_full_parse(
    settings: Settings, tmp_path: Path
) -> None:
    first = _candidate(tmp_path / "search-1.duckdb.tmp", [("d1", "login failed 28P01")])
    # The path reaches DuckDB as an SQL string literal: a quote in it must not end it.
    second = _candidate(tmp_path / "it's-2.duckdb.tmp", [("d2", "ERR-42 after v2.3.1")])
    dbt_log = settings.log_path / "dbt" / "dbt.log"

    fts.build_index(settings, first)
    first_log = dbt_log.read_text(encoding="utf-8")
    fts.build_index(settings, second)
    second_log = dbt_log.read_text(encoding="utf-8")[len(first_log) :]

    assert "Starting full parse" in first_log
    assert "Partial parsing enabled" in second_log
    assert "Unable to do partial parsing" not in second_log
    for path, query, expected in ((first, "28p01", ["d1"]), (second, "ERR-42", ["d2"])):
        assert not Path(f"{path}.wal").exists()  # checkpointed when the macro detached it
        config, matches = _search(path, query)
        assert {key: config[key] for key in projection.fts_config()} == projection.fts_config()
        assert matches == expected
