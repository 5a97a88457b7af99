"""A published artifact damaged while a server runs (an operator's drill: zeros written into
an array): every call fails with one line for the requester, the log says which artifact
once, and `/readyz` answers 503 until a publish moves the pointer off it."""

import logging
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from serving.artifact import LoadedArtifact
from serving.engine import SearchEngine
from serving.models import SearchRequest
from slackquery.artifacts import arrays, files, validate
from slackquery.artifacts.publish import current_artifact, publish
from slackquery.settings import Settings

from .conftest import Pipeline
from .test_mcp import call, http_server, run_client


def zero_records(settings: Settings, fill: int = 0) -> None:
    """The operator's drill: zeros (or `fill` bytes) over the published display records
    (`dd conv=notrunc`), past the `.npy` header, so the file still maps as the same array."""
    path = current_artifact(settings)
    assert path is not None
    records = arrays.array_file(files.arrays_dir_of(path), "display.records.bytes")
    data_start = np.load(records, mmap_mode="r").offset
    records.chmod(0o644)
    with records.open("r+b") as file:
        file.seek(data_start)
        file.write(bytes([fill]) * (records.stat().st_size - data_start))


# What a requester reads: no path, no build id (requesters are not trusted).
DAMAGED = (
    "the published search artifact is damaged (`slackquery reconcile` replaces it); "
    "see the server log"
)
UNREADY_DAMAGED = {"ready": False, "error": DAMAGED}


def test_an_array_damaged_under_a_live_server_fails_every_call_until_a_publish(
    publishable: Settings, pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    with http_server(publishable) as url:
        assert httpx.get(f"{url}/readyz").status_code == 200
        zero_records(publishable)
        assert httpx.get(f"{url}/readyz").status_code == 200  # a probe hashes nothing

        async def damaged(client: object) -> list[str]:
            return [
                await call(client, "search_slack", query="deploy", mode="lexical"),
                await call(client, "list_slack_scopes"),  # reads no array, refused all the same
            ]

        assert run_client(url, damaged) == [f"ERROR: {DAMAGED}"] * 2
        unready = httpx.get(f"{url}/readyz")
        assert (unready.status_code, unready.json()) == (503, UNREADY_DAMAGED)
        publish(publishable, pipeline.second_build)
        ready = httpx.get(f"{url}/readyz").json()
        assert ready["ready"] is True and ready["artifact_id"] == pipeline.second_build

        async def recovered(client: object) -> dict:
            return await call(client, "search_slack", query="zebra", mode="lexical")

        assert run_client(url, recovered)["results"]
    # The operator's reason, once while it lasts: both calls met it.
    (logged,) = [record for record in caplog.records if record.name == "serving.tools"]
    assert logged.levelno == logging.WARNING and logged.exc_info is None
    assert logged.getMessage().startswith(
        f"search_slack cannot answer: published artifact {pipeline.first_artifact.name} is "
        f"damaged (build {pipeline.first_build} is not sealed: checksum mismatch for "
    )
    assert "display.records.bytes.npy" in logged.getMessage()


def test_a_read_error_on_a_sound_artifact_stays_a_bug_and_is_checked_once(
    engine: SearchEngine, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: LoadedArtifact, row: int) -> dict[str, object]:
        raise ValueError("a bug")

    checks: list[str] = []
    verify_sealed = validate.verify_sealed

    def counted(artifact_dir: Path, build_id: str, path: Path) -> dict[str, Any]:
        checks.append(build_id)
        return verify_sealed(artifact_dir, build_id, path)

    monkeypatch.setattr(LoadedArtifact, "display_row", broken)
    monkeypatch.setattr(validate, "verify_sealed", counted)
    for _ in range(2):
        with pytest.raises(ValueError, match="a bug"):
            engine.search(SearchRequest(query="deploy", mode="lexical"))
    assert checks == [pipeline.first_build] and engine.status()["ready"] is True
