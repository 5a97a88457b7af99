"""The `embed` flow on a small Dask LocalCluster: fan-out, one model load per worker, a
SIGKILLed worker or flow that loses nothing and duplicates nothing, and a scheduler address
where no scheduler answers refused in one line, in bounded time."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, temporary_settings
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import flows.embed
import slackquery.embedding.work as work
from flows.embed import ensure_dask_scheduler, with_dask
from slackquery.crash import CRASH_ENV
from slackquery.embedding.base import finalize_vectors
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.embedding.documents import create_state_db, message_texts
from tests.embedding.endpoint import DIMENSION, MODEL, Endpoint, hash_vector
from tests.flows.hash_embedder import IDENTITY, KILL_AT_ENV, MARKERS_ENV, load, vector_of
from tests.loopback import serve

ROOT = Path(__file__).resolve().parents[2]


def _items(path: Path) -> dict[str, tuple]:
    connection = duckdb.connect(str(path), read_only=True)
    try:
        rows = connection.execute(
            "select document_id, state, attempt_count, embedded_at, embedding, text_embedding "
            "from embedding_work_items inner join search_documents using (document_id, text_hash)"
        ).fetchall()
    finally:
        connection.close()
    return {row[0]: row[1:] for row in rows}


def _assert_all_embedded_once(path: Path, count: int) -> dict[str, tuple]:
    items = _items(path)
    assert len(items) == count and {row[0] for row in items.values()} == {"succeeded"}
    for _state, _attempts, _at, embedding, text in items.values():
        expected = finalize_vectors(vector_of(text)[None, :], IDENTITY)[0][0]
        np.testing.assert_array_equal(np.asarray(embedding, dtype=np.float32), expected)
    return items


@pytest.fixture
def dask_env(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Settings, Path]:
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv(MARKERS_ENV, str(markers))
    monkeypatch.setenv("SLACKQUERY_EMBEDDING_DASK_BATCH_SIZE", "4")
    monkeypatch.setattr(work, "build_embedder", lambda _settings: load())
    create_state_db(settings.state_path, message_texts(40))
    return settings, markers


@contextmanager
def _port_taken(port: int) -> Iterator[None]:
    """Hold `port` on loopback, as another cluster's scheduler would (if nothing else does)."""
    with socket.socket() as holder:
        with suppress(OSError):  # already taken: the same condition
            holder.bind(("127.0.0.1", port))
            holder.listen()
        yield


@contextmanager
def _not_a_scheduler(kind: str) -> Iterator[tuple[str, socket.socket | None]]:
    """An address where no Dask scheduler answers, and the listening socket when it is one
    that never accepts (the kernel completes the connection; nothing ever speaks)."""
    if kind == "http":  # the dashboard's port by mistake, or any web service
        app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("dashboard"))])
        with serve(app) as url:
            yield url.replace("http://", "tcp://"), None
        return
    if kind == "http-at-once":  # a proxy that answers before it is asked
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            threading.Thread(target=_answer_400, args=(listener,), daemon=True).start()
            yield f"tcp://127.0.0.1:{listener.getsockname()[1]}", listener
        return
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        if kind == "silent":
            listener.listen()
            yield f"tcp://127.0.0.1:{port}", listener
        else:  # bound, not listening: the connection is refused
            yield f"tcp://127.0.0.1:{port}", None


def _answer_400(listener: socket.socket) -> None:
    """Answer every connection with an HTTP 400 at once, until the listener closes."""
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """`call()`, failing the test (not hanging it) if it takes longer than `seconds`; the
    daemon thread left behind then does not hold up the interpreter's exit."""
    future: Future[Any] = Future()

    def target() -> None:
        try:
            future.set_result(call())
        except BaseException as error:  # handed to the test's thread as is
            future.set_exception(error)

    threading.Thread(target=target, daemon=True).start()
    return future.result(timeout=seconds)


@pytest.mark.parametrize("kind", ["silent", "http", "http-at-once", "refused"])
def test_an_address_without_a_scheduler_is_refused_in_one_line_in_bounded_time(
    kind: str,
) -> None:
    with _not_a_scheduler(kind) as (address, _listener):
        started = time.perf_counter()
        with pytest.raises(SlackqueryError) as caught:
            _within(20, lambda: ensure_dask_scheduler(address, timeout_s=0.3))
        elapsed = time.perf_counter() - started
    message = str(caught.value)
    assert message.startswith(f"cannot reach the Dask scheduler at {address}: ")
    assert "\n" not in message and elapsed < 0.3 + flows.embed.HANDSHAKE_GRACE_S + 2
    # What the peer's bytes made Dask raise ("Unable to allocate 3.07 EiB") is no reason.
    reason = "connection refused" if kind == "refused" else "is it a Dask scheduler's port?"
    assert reason in message, message


def test_a_port_nothing_listens_at_is_refused_without_waiting_out_the_timeout() -> None:
    # Dask's own connect retries a refused port until its timeout: a deployment's flow
    # would wait it out before saying what the CLI says at once.
    with (
        _not_a_scheduler("refused") as (address, _listener),
        pytest.raises(SlackqueryError) as caught,
    ):
        _within(5, lambda: ensure_dask_scheduler(address, timeout_s=60))
    assert str(caught.value) == f"cannot reach the Dask scheduler at {address}: connection refused"


def test_the_flow_refuses_a_silent_address_in_one_line_before_any_claim(
    dask_env: tuple[Settings, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, _markers = dask_env
    monkeypatch.setattr(flows.embed, "DASK_CONNECT_TIMEOUT_S", 0.3)
    with (
        _not_a_scheduler("silent") as (address, _listener),
        pytest.raises(SlackqueryError, match=f"cannot reach the Dask scheduler at {address}"),
    ):
        _within(60, with_dask(address=address))
    states = {row[:2] for row in _items(settings.state_path).values()}
    assert states == {("pending", 0)}  # refused before any claim


def test_a_run_with_nothing_to_claim_never_contacts_dask(
    dask_env: tuple[Settings, Path],
) -> None:
    settings, _markers = dask_env
    connection = duckdb.connect(str(settings.state_path))
    connection.execute("delete from search_documents")
    connection.close()
    with _not_a_scheduler("silent") as (address, listener):
        result = _within(60, with_dask(address=address))
        assert result["claimable"] == 0 and result["claimed"] == 0
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # no connection is waiting to be accepted
            listener.accept()


@pytest.mark.parametrize("workers", [0, -1])
def test_fewer_than_one_worker_is_refused(workers: int) -> None:
    with pytest.raises(SlackqueryError, match=f"dask_workers must be at least 1, not {workers}"):
        with_dask(workers=workers)


def test_local_workers_report_to_the_flows_api_even_when_none_is_configured() -> None:
    # From a terminal no API is configured: each worker then started a temporary Prefect
    # server of its own (~15 s before its first batch; its task runs kept apart).
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        runner = with_dask(workers=2).task_runner
        temporary = SubprocessASGIServer().api_url  # the one this process's flows use
    assert runner.cluster_kwargs["env"] == {"PREFECT_API_URL": temporary}
    configured = with_dask(workers=2).task_runner
    assert configured.cluster_kwargs["env"] == {"PREFECT_API_URL": PREFECT_API_URL.value()}


def test_two_workers_embed_everything_once_loading_the_model_once_each(
    dask_env: tuple[Settings, Path],
) -> None:
    settings, markers = dask_env
    with _port_taken(8787):  # Dask's default HTTP port: a second cluster must not need it
        result = with_dask(workers=2)()
    assert result["succeeded"] == 40 and result["coverage"] == 1.0 and result["batches"] == 10
    items = _assert_all_embedded_once(settings.state_path, 40)
    assert {row[1] for row in items.values()} == {1}
    loads = {p.name for p in markers.iterdir()} - {f"load-{os.getpid()}"}
    assert len(loads) == 2  # one per worker process, not one per batch
    # Each worker reports to the flow's API: without it in their environment they started
    # temporary servers of their own.
    api = {(markers / name).read_text() for name in loads}
    assert api == {str(PREFECT_API_URL.value())}
    assert result["worker_warm_up_s"] > 0  # both loaded before the first claim


def test_an_http_embedder_fans_out_validated_once_per_worker(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_state_db(settings.state_path, message_texts(12))
    endpoint = Endpoint()
    with serve(endpoint.app) as url:
        for name, value in {
            "TRANSPORT": "ollama",
            "URL": url,
            "MODEL": MODEL,
            "DIMENSION": str(DIMENSION),
            "DASK_BATCH_SIZE": "4",
        }.items():
            monkeypatch.setenv(f"SLACKQUERY_EMBEDDING_{name}", value)
        result = with_dask(workers=2)()
    assert result["succeeded"] == 12 and result["batches"] == 3
    for _state, _attempts, _at, embedding, text in _items(settings.state_path).values():
        expected = np.asarray(hash_vector(text))
        np.testing.assert_allclose(embedding, expected / np.linalg.norm(expected), rtol=1e-6)
    # The flow and each worker process validated the endpoint once, not once per batch.
    assert endpoint.paths.count("/api/tags") == 3


def test_a_killed_worker_loses_and_duplicates_nothing(
    dask_env: tuple[Settings, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, markers = dask_env
    monkeypatch.setenv(KILL_AT_ENV, "2")
    result = with_dask(workers=2)()
    assert (markers / "killed").exists()
    assert result["succeeded"] == 40 and result["counts"]["succeeded"] == 40
    items = _assert_all_embedded_once(settings.state_path, 40)
    # Dask re-ran the killed worker's batch elsewhere under the same lease: no new attempt.
    assert {row[1] for row in items.values()} == {1}


def test_a_killed_flow_resumes_without_loss_or_rework(
    dask_env: tuple[Settings, Path],
) -> None:
    settings, _markers = dask_env
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        CRASH_ENV: "after_embed_batch_3",
    }
    killed = subprocess.run(
        [sys.executable, "-m", "tests.flows.hash_embedder_run", "--dask-workers", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-3000:]
    after_crash = _items(settings.state_path)
    done_before = {doc: row[2] for doc, row in after_crash.items() if row[0] == "succeeded"}
    assert len(done_before) == 12  # three batches of 4 recorded before the kill
    # Two batches per worker were out, each under its own lease of the dead flow process.
    assert [row[0] for row in after_crash.values()].count("in_progress") == 16
    result = with_dask(workers=2)()
    assert result["released_leases"] == 4 and result["claimed"] == 28
    final = _assert_all_embedded_once(settings.state_path, 40)
    for doc, embedded_at in done_before.items():  # never embedded again once succeeded
        assert final[doc][2] == embedded_at and final[doc][1] == 1
