"""The work queue: what is enqueued, leases, no-op re-runs, and the SIGKILL crash test."""

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pytest

from slackquery.artifacts import files
from slackquery.cli import main
from slackquery.crash import CRASH_ENV
from slackquery.embedding import build_embedder, state
from slackquery.embedding.run_progress import RunProgress, progress_path, running_embed
from slackquery.embedding.work import (
    MIN_GUIDED_BATCH,
    BatchOutcome,
    Done,
    EmbedRun,
    drive_batches,
    embed_pending,
    guided_batch_size,
)
from slackquery.settings import Settings
from tests.crashing import held_open
from tests.embedding.documents import (
    create_state_db,
    message_texts,
    upsert_documents,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _items(path: Path) -> dict[str, tuple]:
    connection = duckdb.connect(str(path), read_only=True)
    try:
        rows = connection.execute(
            "select document_id, text_hash, state, attempt_count, embedded_at, embedding "
            "from embedding_work_items order by document_id, text_hash"
        ).fetchall()
    finally:
        connection.close()
    return {(row[0], row[1]): row[2:] for row in rows}


def test_only_active_messages_are_enqueued_and_reruns_are_noops(settings: Settings) -> None:
    create_state_db(settings.state_path, message_texts(5))
    connection = duckdb.connect(str(settings.state_path))
    upsert_documents(connection, ["thread context text"], kind="thread_context", start=100)
    upsert_documents(connection, ["deleted"], active=False, start=200)
    connection.close()
    first = embed_pending(settings)
    assert (first["enqueued"], first["succeeded"], first["coverage"]) == (5, 5, 1.0)
    second = embed_pending(settings)
    assert (second["enqueued"], second["claimed"], second["counts"]["succeeded"]) == (0, 0, 5)
    # An edit gets a new item under the new text hash; the old vector stays as history.
    connection = duckdb.connect(str(settings.state_path))
    upsert_documents(connection, ["#general user0: edited text"])
    connection.close()
    third = embed_pending(settings)
    assert (third["enqueued"], third["succeeded"], third["wanted_documents"]) == (1, 1, 5)
    assert len(_items(settings.state_path)) == 6


def test_leases_block_until_expiry_and_dead_owners_are_released(settings: Settings) -> None:
    create_state_db(settings.state_path, message_texts(4))
    config = settings.model_copy(update={"embedding_lease_s": 600, "embedding_batch_size": 2})
    embed_pending(config, max_items=0, now=lambda: T0)  # enqueue only
    connection = duckdb.connect(str(settings.state_path))
    generation = build_embedder(config).identity.generation_id
    live = state.ClaimQueue(connection, generation).claim(2, lease_s=600, now=T0)
    dead_lease = f"{socket.gethostname()}:999999999:1:deadbeef0000"
    dead = state.ClaimQueue(connection, generation).claim(
        2, lease_s=600, now=T0, lease_id=dead_lease
    )
    # A stale owner cannot record over a lease it no longer holds.
    assert (
        state.record_successes(
            connection, generation, "someone-else", live.items, np.ones((2, 384)), T0
        )
        == 0
    )
    connection.close()
    soon = embed_pending(config, now=lambda: T0 + timedelta(seconds=1))
    assert soon["released_leases"] == 1 and soon["claimed"] == 2  # the dead owner's items
    assert {item.document_id for item in dead.items} <= {
        key[0] for key, row in _items(settings.state_path).items() if row[0] == "succeeded"
    }
    assert soon["counts"]["in_progress"] == 2  # the live lease is respected
    later = embed_pending(config, now=lambda: T0 + timedelta(seconds=601))
    assert later["claimed"] == 2 and later["counts"]["succeeded"] == 4
    assert {row[1] for row in _items(settings.state_path).values()} == {2}


def test_status_counts_apart_the_claims_of_runs_that_ended(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # After a killed embed, its items showed as in_progress as if a run were at them.
    connection, generation = _enqueued(settings, 8)
    now = datetime.now(UTC)
    claims = state.ClaimQueue(connection, generation)
    claims.claim(2, lease_s=600, now=now)  # this process: alive, its lease running
    claims.claim(2, lease_s=600, now=now, lease_id=f"{socket.gethostname()}:999999999:1:dead")
    claims.claim(1, lease_s=600, now=now - timedelta(hours=1))  # its lease ran out
    connection.close()
    assert main(["embedding-status", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["generations"]
    assert entry["counts"]["in_progress"] == 5 and entry["abandoned_in_progress"] == 3
    assert main(["embedding-status"]) == 0
    assert (
        "    3 in_progress of runs that ended (killed, or past their lease): the next embed "
        "run claims them again\n" in capsys.readouterr().out
    )


def _enqueued(settings: Settings, count: int) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A state DB with `count` pending items, and its generation."""
    create_state_db(settings.state_path, message_texts(count))
    embed_pending(settings, max_items=0, now=lambda: T0)  # enqueue only
    generation = build_embedder(settings).identity.generation_id
    return duckdb.connect(str(settings.state_path)), generation


def test_the_claim_window_leases_every_item_once_in_claimable_order(
    settings: Settings, monkeypatch
) -> None:
    connection, generation = _enqueued(settings, 7)
    order = [item.document_id for item in state.next_claimable(connection, generation, T0, 100)]
    monkeypatch.setattr(state, "CLAIM_WINDOW", 3)  # windows of 3 for batches of 2
    queue = state.ClaimQueue(connection, generation)
    batches = []
    while claim := queue.claim(2, lease_s=600, now=T0).items:
        batches.append(claim)
    assert [len(batch) for batch in batches] == [2, 1, 2, 1, 1]
    assert [item.document_id for batch in batches for item in batch] == order
    assert {item.attempt_count for batch in batches for item in batch} == {1}
    assert state.count_claimable(connection, generation, T0) == 0


def test_a_window_never_leases_what_another_lease_took_meanwhile(settings: Settings) -> None:
    connection, generation = _enqueued(settings, 4)
    first, second = (state.ClaimQueue(connection, generation) for _ in range(2))
    head = first.claim(1, lease_s=600, now=T0)  # reads all four into its window
    taken = second.claim(2, lease_s=600, now=T0)
    rest = first.claim(4, lease_s=600, now=T0)
    leased = [item.document_id for claim in (head, taken, rest) for item in claim.items]
    assert sorted(leased) == sorted(set(leased)) and len(leased) == 4
    assert len(rest.items) == 1


def test_a_retry_falling_due_is_claimed_once_the_window_runs_dry(settings: Settings) -> None:
    connection, generation = _enqueued(settings, 3)
    queue = state.ClaimQueue(connection, generation)
    failed = queue.claim(1, lease_s=600, now=T0)
    state.record_failures(
        connection,
        generation,
        failed.lease_id,
        failed.items,
        error_class="http_503",
        error_message="busy",
        next_attempt_at=T0 + timedelta(seconds=5),
        max_attempts=5,
        now=T0,
    )
    later = T0 + timedelta(seconds=10)
    rest = [item.document_id for item in queue.claim(5, lease_s=600, now=later).items]
    retried = queue.claim(5, lease_s=600, now=later).items
    assert failed.items[0].document_id not in rest and len(rest) == 2
    assert [(item.document_id, item.attempt_count) for item in retried] == [
        (failed.items[0].document_id, 2)
    ]
    assert not queue.claim(5, lease_s=600, now=later).items


def test_an_old_state_db_upgrades_and_retry_failed_gives_terminal_items_a_chance(
    settings: Settings,
) -> None:
    create_state_db(settings.state_path, message_texts(4))
    embed_pending(settings, max_items=0, now=lambda: T0)  # enqueue only
    connection = duckdb.connect(str(settings.state_path))
    # The layout before `transient_failures`, with what an outage used to leave behind.
    connection.execute("alter table embedding_work_items drop column transient_failures")
    connection.execute(
        "update embedding_work_items set state = 'terminal_failed', attempt_count = 5, "
        "error_class = 'http_500', error_message = 'boom'"
    )
    connection.close()
    stuck = embed_pending(settings, now=lambda: T0)
    assert stuck["claimed"] == 0 and stuck["counts"]["terminal_failed"] == 4
    retried = embed_pending(settings, now=lambda: T0, retry_failed=True)
    assert retried["retried_failed"] == 4 and retried["counts"]["succeeded"] == 4
    assert {row[1] for row in _items(settings.state_path).values()} == {1}


@pytest.mark.parametrize("inside_duckdb", [False, True], ids=["python", "duckdb"])
def test_ctrl_c_hands_the_runs_claims_back_uncharged_and_records_its_rate(
    settings: Settings, inside_duckdb: bool
) -> None:
    create_state_db(settings.state_path, message_texts(12))
    config = settings.model_copy(update={"embedding_batch_size": 4})
    embedder = build_embedder(config)
    embed_batch, calls = embedder.embed_document_batch, []

    def interrupted_on_the_second_batch(texts: Sequence[str]) -> tuple[np.ndarray, dict]:
        calls.append(texts)
        if len(calls) == 2 and inside_duckdb:  # as DuckDB ends a query for Ctrl-C
            raise RuntimeError("Query interrupted") from KeyboardInterrupt()
        if len(calls) == 2:
            raise KeyboardInterrupt
        return embed_batch(texts)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(embedder, "embed_document_batch", interrupted_on_the_second_batch)
        embed_pending(config, embedder=embedder, now=lambda: T0)
    rows = sorted((row[0], row[1]) for row in _items(settings.state_path).values())
    assert rows == [("pending", 0)] * 8 + [("succeeded", 1)] * 4
    connection = duckdb.connect(str(settings.state_path), read_only=True)
    try:
        assert connection.execute("select documents from embedding_runs").fetchall() == [(4,)]
    finally:
        connection.close()
    resumed = embed_pending(config, embedder=embedder, now=lambda: T0)
    assert resumed["claimed"] == 8 and resumed["counts"]["succeeded"] == 12
    assert {row[1] for row in _items(settings.state_path).values()} == {1}


class _Interrupted:
    """A batch out on a worker when Ctrl-C arrives."""

    def result(self) -> BatchOutcome:
        raise KeyboardInterrupt


def _flow_like_run(settings: Settings, count: int) -> tuple[EmbedRun, int]:
    """An EmbedRun over `count` pending items, driven below as the Prefect flow drives it."""
    create_state_db(settings.state_path, message_texts(count))
    run = EmbedRun(settings, now=lambda: T0)
    return run, run.prepare()["claimable"]


def test_the_loop_stops_any_caller_after_three_failed_batches_in_a_row(
    settings: Settings,
) -> None:
    run, claimable = _flow_like_run(settings, 20)
    failed = BatchOutcome(error_class="timeout", error_message="embed: timed out")
    try:
        drive_batches(  # the flow's shape: its own submit, two batches in flight
            run,
            claimable,
            max_items=None,
            progress=False,
            claim=run.claim,
            submit=lambda claim: Done(failed),
            record=run.record,
            in_flight=2,
            batch_size=4,
        )
        summary = run.summary(0.0, {})
        counts = state.state_counts(run.connection, run.generation_id)
    finally:
        run.close()
    assert summary["stopped"] == (
        "the embedding endpoint failed 3 batches in a row: embed: timed out"
    )
    assert summary["batches"] == 4  # the batch in flight when it stopped is recorded too
    assert (counts["retryable_failed"], counts["pending"], counts["in_progress"]) == (16, 4, 0)


def test_ctrl_c_in_the_loop_hands_back_every_batch_in_flight(settings: Settings) -> None:
    run, claimable = _flow_like_run(settings, 12)
    try:
        with pytest.raises(KeyboardInterrupt):
            drive_batches(
                run,
                claimable,
                max_items=None,
                progress=False,
                claim=run.claim,
                submit=lambda claim: _Interrupted(),
                record=run.record,
                in_flight=2,
                batch_size=4,
            )
        counts = state.state_counts(run.connection, run.generation_id)
    finally:
        run.close()
    assert (counts["pending"], counts["in_progress"]) == (12, 0)
    assert {row[1] for row in _items(settings.state_path).values()} == {0}


def test_sigkill_mid_batch_resumes_without_loss_or_rework(
    settings: Settings, tmp_path: Path
) -> None:
    texts = message_texts(60)
    create_state_db(settings.state_path, texts)
    env = {
        **os.environ,
        "SLACKQUERY_HOME": str(settings.home),
        "SLACKQUERY_EMBEDDING_BATCH_SIZE": "8",
        CRASH_ENV: "after_embed_batch_3",
    }
    killed = subprocess.run(
        [sys.executable, "-m", "slackquery.cli", "embed", "--json", "--engine", "plain"],
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    after_crash = _items(settings.state_path)
    states = [row[0] for row in after_crash.values()]
    assert states.count("succeeded") == 24 and states.count("in_progress") == 8
    done_before = {key: row[2] for key, row in after_crash.items() if row[0] == "succeeded"}

    resumed = embed_pending(settings.model_copy(update={"embedding_batch_size": 8}))
    assert resumed["released_leases"] == 1 and resumed["claimed"] == 36
    final = _items(settings.state_path)
    assert len(final) == 60 and {row[0] for row in final.values()} == {"succeeded"}
    for key, embedded_at in done_before.items():  # never embedded twice once succeeded
        assert final[key][2] == embedded_at and final[key][1] == 1
    killed_batch = [key for key, row in after_crash.items() if row[0] == "in_progress"]
    assert {final[key][1] for key in killed_batch} == {2}  # the killed attempt counted

    reference_home = tmp_path / "reference"
    create_state_db(reference_home / "state.duckdb", texts)
    uninterrupted = embed_pending(Settings(home=reference_home))
    assert uninterrupted["succeeded"] == 60
    reference = _items(reference_home / "state.duckdb")
    for key, row in final.items():
        np.testing.assert_array_equal(np.asarray(row[3]), np.asarray(reference[key][3]))


def test_cli_embed_and_status_report_json(settings: Settings, capsys) -> None:
    create_state_db(settings.state_path, message_texts(3))
    assert main(["embedding-status", "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["generations"] == [] and before["configured_generation"]
    assert main(["embed", "--json", "--engine", "plain"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["counts"]["succeeded"] == 3 and result["coverage"] == 1.0
    assert main(["embedding-status"]) == 0
    text = capsys.readouterr().out
    assert "* ort-int8/multilingual-e5-small-q4+all-minilm-l6-v2@" in text
    assert "coverage 3/3" in text
    assert main(["embedding-status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["generations"][0]["is_configured"]
    assert status["generations"][0]["counts"]["succeeded"] == 3


def test_cli_errors_are_one_line(settings: Settings, capsys) -> None:
    settings.state_path.parent.mkdir(parents=True)
    assert main(["embed", "--engine", "plain"]) == 1  # a new home: nothing written
    assert capsys.readouterr().err == (
        f"error: no state database at {settings.state_path}: run `slackquery project` first\n"
    )
    # Nothing but the pipeline lock every writing command holds.
    assert [path.name for path in settings.home.iterdir()] == [files.RECONCILE_LOCK_NAME]
    duckdb.connect(str(settings.state_path)).close()
    assert main(["embed", "--engine", "plain"]) == 1
    assert "no search_documents table" in capsys.readouterr().err
    assert main(["embed", "--engine", "plain", "--dask-workers", "2"]) == 1
    assert "need the Prefect engine" in capsys.readouterr().err
    assert main(["embed-server", "--host", "0.0.0.0"]) == 1
    assert "without --api-key" in capsys.readouterr().err
    assert main(["embed-server", "--api-key", "short"]) == 1
    assert "at least 16" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--dask-address", "notaurl"),
        ("--dask-address", "tcp://10.0.0.5"),
        ("--dask-address", "tcp://10.0.0.5:99999"),
        ("--dask-address", "http://10.0.0.5:8786"),
        ("--dask-workers", "-1"),
        ("--dask-workers", "0"),
    ],
)
def test_malformed_dask_options_are_usage_errors(
    settings: Settings, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["embed", option, value])
    assert exited.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"slackquery embed: error: argument {option}: ")


@pytest.mark.parametrize("command", ["embed", "reconcile"])
def test_an_unreachable_scheduler_is_one_line_naming_it(
    settings: Settings, capsys, command: str
) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
        assert main([command, "--engine", "prefect", "--dask-address", address]) == 1
    assert capsys.readouterr().err == (
        f"error: cannot reach the Dask scheduler at {address}: connection refused\n"
    )


def test_status_projects_time_to_full_coverage_at_the_measured_rate(
    settings: Settings, capsys
) -> None:
    create_state_db(settings.state_path, message_texts(6))
    connection = duckdb.connect(str(settings.state_path))
    state.ensure_schema(connection)
    identity = build_embedder(settings).identity
    state.register_generation(connection, identity, T0)
    generation = identity.generation_id
    state.record_run(connection, generation, 40, 2.0, T0)  # 20 docs/s
    state.record_run(connection, generation, 0, 5.0, T0)  # embedded nothing: no rate
    state.record_run(connection, generation, 20, 2.0, T0 + timedelta(hours=1))  # 10 docs/s
    connection.close()
    assert main(["embedding-status", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["generations"][0]
    assert entry["missing_documents"] == 6 and entry["measured_docs_per_s"] == 15.0
    assert entry["projected_s_to_full_coverage"] == 0.4
    assert main(["embedding-status"]) == 0
    assert "projected 0m 00s to embed the 6 missing at 15.0 docs/s" in capsys.readouterr().out

    # terminal_failed items are never claimed again: not projected, and the way out named.
    connection = duckdb.connect(str(settings.state_path))
    state.enqueue(connection, generation, T0)
    connection.execute(
        "update embedding_work_items set state = 'terminal_failed' where document_id in "
        "(select document_id from embedding_work_items order by document_id limit 2)"
    )
    connection.close()
    assert main(["embedding-status"]) == 0
    shown = capsys.readouterr().out
    assert "projected 0m 00s to embed the 4 missing at 15.0 docs/s" in shown
    assert "2 terminal_failed: never claimed again; `slackquery embed --retry-failed`" in shown


def test_parallel_batches_shrink_towards_the_end_so_workers_finish_together() -> None:
    assert guided_batch_size(512, remaining=4_000, in_flight=4) == 512
    assert guided_batch_size(512, remaining=1_000, in_flight=4) == 250
    assert guided_batch_size(512, remaining=10, in_flight=4) == MIN_GUIDED_BATCH
    assert guided_batch_size(4, remaining=1_000, in_flight=4) == 4  # never above the setting


def test_status_reads_a_running_embeds_progress_beside_the_state_it_holds(
    state_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # While embed holds the state database, embedding-status was refused for hours.
    run = EmbedRun(state_settings, now=lambda: T0)
    progress_file = progress_path(state_settings.state_path)
    try:
        assert run.prepare()["claimable"] == 20
        run.record(claim := run.claim(8), run.embed(claim))
        written = json.loads(progress_file.read_text(encoding="utf-8"))
        assert (written["claimable"], written["succeeded"], written["pid"]) == (20, 8, os.getpid())
    finally:
        run.close()
    assert not progress_file.exists()  # the run ended: nothing to read beside the state
    with held_open(state_settings.state_path) as holder:
        progress = RunProgress(state_settings.state_path, "g1", T0)
        progress.report["pid"] = holder
        progress.update(T0 + timedelta(seconds=4), claimable=20, claimed=8, succeeded=8, failed=0)
        assert main(["embedding-status"]) == 0
        running = capsys.readouterr().out.splitlines()[-1]
        assert running == (
            "running      since 2026-01-05T12:00:00+00:00: 8 of 20 items done (8 succeeded, "
            "0 failed) as of 2026-01-05T12:00:04+00:00; 2.0 docs/s, about 0m 06s left"
        )
        progress.report["pid"] = holder + 1  # a killed run's file: not the holder's
        progress.update(T0, claimable=20)
        assert main(["embedding-status"]) == 1
        assert "is busy: another process" in capsys.readouterr().err


@pytest.mark.parametrize(
    "written",
    ["{", "[]", '{"pid": 1}', '{"pid": 1, "started_at": "x", "updated_at": "y"}'],
)
def test_a_progress_file_that_is_no_runs_report_is_not_read(tmp_path: Path, written: str) -> None:
    # One naming the holder's PID but missing a field failed embedding-status with a traceback.
    state_path = tmp_path / "state.duckdb"
    progress_path(state_path).write_text(written, encoding="utf-8")
    assert running_embed(state_path, 1) is None
