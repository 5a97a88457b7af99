"""How suites batch a table: one streamed query cut into exact `chunk_rows` batches."""

from pathlib import Path

import duckdb

from expectations.suites import Artifact, chunks, table_facts


def test_batches_are_exact_and_carry_the_table_facts(tmp_path: Path) -> None:
    conn = duckdb.connect()
    try:
        conn.execute("create table numbers as select range as n from range(7000)")
        artifact = Artifact(conn=conn, chunk_rows=3000, has_fts=False, arrays=tmp_path)
        facts = table_facts(conn, "numbers")
        batches = list(chunks(artifact, "select n from numbers", facts))
    finally:
        conn.close()
    assert [len(batch) for batch in batches] == [3000, 3000, 1000]
    assert sorted(n for batch in batches for n in batch["n"]) == list(range(7000))
    assert facts == {"table_rows": 7000, "schema_signature": "n BIGINT"}
    assert all((batch["table_rows"] == 7000).all() for batch in batches)
    assert all((batch["schema_signature"] == "n BIGINT").all() for batch in batches)


def test_an_empty_table_still_gives_one_batch(tmp_path: Path) -> None:
    conn = duckdb.connect()
    try:
        conn.execute("create table nothing (n bigint)")
        artifact = Artifact(conn=conn, chunk_rows=5, has_fts=False, arrays=tmp_path)
        batches = list(chunks(artifact, "select n from nothing", table_facts(conn, "nothing")))
    finally:
        conn.close()
    assert len(batches) == 1 and batches[0].empty
    assert list(batches[0].columns) == ["n", "table_rows", "schema_signature"]
