"""Validation of artifacts: the GX checkpoint in a fresh process, and seal checks.

A sealed artifact is a final-named, read-only file whose sha256 and metadata match its
manifest, with the arrays folder beside it whose files' sha256 match it too. Every
checkpoint result records its inputs besides the artifact's bytes (`checkpoint_inputs`):
publish reuses the build's passing result when the seal holds and those inputs are still
the same, and runs the checkpoint again otherwise; rollback always runs it again, because
a retained file was validated against another published artifact, perhaps by older checks.
"""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import duckdb

from slackquery.artifacts import arrays, files
from slackquery.artifacts.pointer import current_artifact
from slackquery.crash import crash_point
from slackquery.duckdb_setup import open_database
from slackquery.errors import SlackqueryError
from slackquery.projection import PROJECT_DIR
from slackquery.settings import Settings


class ValidationFailed(SlackqueryError):
    """The GX checkpoint ran and at least one expectation failed."""


# `python -m expectations.checkpoint`'s exit status when a SlackqueryError stopped it (its
# `COULD_NOT_RUN`; importing it would import Great Expectations): its last line says why.
CHECKPOINT_COULD_NOT_RUN = 2
# The code a checkpoint result depends on: the suites and the artifact readers they use.
CHECKS_SOURCES = ("expectations", "slackquery/artifacts")


def _checks_sha256() -> str:
    digest = hashlib.sha256()
    for folder in CHECKS_SOURCES:
        for source in sorted((PROJECT_DIR / folder).rglob("*.py")):
            digest.update(source.relative_to(PROJECT_DIR).as_posix().encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def _previous_for(settings: Settings, path: Path, compare_with_current: bool) -> Path | None:
    previous = current_artifact(settings) if compare_with_current else None
    if previous is not None and previous.resolve() == path.resolve():
        return None
    return previous


def checkpoint_inputs(settings: Settings, previous: Path | None) -> dict[str, Any]:
    """What a checkpoint result depends on besides the artifact's own bytes."""
    return {
        "previous": str(previous) if previous else None,
        "max_count_drift": settings.max_count_drift,
        "count_drift_min_drop": settings.count_drift_min_drop,
        "checks_sha256": _checks_sha256(),
    }


def _repeated(
    settings: Settings, path: Path, result_path: Path, success: bool
) -> dict[str, Any] | None:
    """The result at `result_path` when it has `success` and running the checkpoint on
    `path` now would repeat it (the same inputs); None otherwise."""
    try:
        result = files.read_json(result_path)
    except (OSError, ValueError):
        return None
    inputs = checkpoint_inputs(settings, _previous_for(settings, path, True))
    if not isinstance(result, dict) or result.get("success") is not success:
        return None
    return result if result.get("inputs") == inputs else None


def reusable_result(settings: Settings, path: Path, result_path: Path) -> dict[str, Any] | None:
    """The passing result at `result_path` when running the checkpoint on `path` now
    would repeat it; None when it must run. Call only after `verify_sealed`: the seal is
    what proves the bytes are the ones that result validated.
    """
    return _repeated(settings, path, result_path, True)


def standing_refusal(settings: Settings, path: Path, refused_path: Path) -> dict[str, Any] | None:
    """The failed re-check at `refused_path` when running the checkpoint on `path` now
    would repeat it (the same published artifact, drift settings and checks), so an
    hourly reconcile does not validate a refused build again and again; call only after
    `verify_sealed`, like `reusable_result`.
    """
    return _repeated(settings, path, refused_path, False)


def same_checkpoint_inputs(settings: Settings, result: dict[str, Any]) -> bool:
    """Whether the checkpoint `result` of a build ran with the inputs a new build's
    checkpoint would run with now (the same published artifact to compare with, drift
    settings and checks): a new build of the same state would get the same result, so
    reconcile does not build the inputs of a refused build again and again.
    """
    return result.get("inputs") == checkpoint_inputs(settings, current_artifact(settings))


def run_checkpoint(
    settings: Settings, path: Path, result_path: Path, *, compare_with_current: bool = True
) -> dict[str, Any]:
    """Validate `path` with the GX checkpoint in a process of its own; return its result.

    A separate process (forked by `expectations.server`) proves the file opens read-only
    on its own and keeps the validation's memory out of the builder. The result, with its
    `checkpoint_inputs`, is written to `result_path`.
    """
    previous = _previous_for(settings, path, compare_with_current)
    argv = [
        str(path),
        "--output",
        str(result_path),
        "--max-count-drift",
        str(settings.max_count_drift),
        "--count-drift-min-drop",
        str(settings.count_drift_min_drop),
        "--chunk-rows",
        str(settings.validation_chunk_rows),
    ]
    if previous is not None:
        argv += ["--previous", str(previous)]
    with tempfile.TemporaryDirectory(prefix="slackquery-validation-") as scratch:
        log_path = Path(scratch) / "checkpoint.log"
        exit_code = _VALIDATOR.run(argv, log_path)
        if exit_code not in (0, 1) or not result_path.exists():
            output = log_path.read_text(errors="replace") if log_path.exists() else ""
            tail = output.strip().splitlines()[-5:]
            if exit_code == CHECKPOINT_COULD_NOT_RUN and tail and tail[-1].startswith("error: "):
                raise SlackqueryError(
                    f"validation of {path.name} could not run: {tail[-1].removeprefix('error: ')}"
                )
            raise SlackqueryError(
                f"validation of {path.name} crashed (exit {exit_code}): {' | '.join(tail)}"
            )
    result = files.read_json(result_path)
    result["inputs"] = checkpoint_inputs(settings, previous)
    # Read-only like the manifest: a passing result here lets publish skip the checkpoint.
    files.write_json_atomic(result_path, result, mode=files.READ_ONLY)
    return result


def recheck(
    settings: Settings,
    path: Path,
    result_path: Path,
    refused_path: Path,
    *,
    compare_with_current: bool,
) -> dict[str, Any]:
    """Run the checkpoint on a sealed artifact again (publish, rollback): a pass replaces
    the result at `result_path`, a failure is kept at `refused_path`, so a refusal never
    overwrites the passing result the build recorded."""
    scratch = result_path.with_name(f".{result_path.name}.{uuid.uuid4().hex}.tmp")
    result = run_checkpoint(settings, path, scratch, compare_with_current=compare_with_current)
    os.replace(scratch, result_path if result["success"] else refused_path)
    files.fsync_dir(result_path.parent)
    return result


class _ValidatorServer:
    """This process's `expectations.server`, started at its first validation.

    One validation runs at a time per builder process (builds of one artifact folder are
    serialised by its lock anyway). The server and the processes it forks have a session
    of their own, so a terminal's Ctrl-C reaches only the builder, which then kills them
    all; the next validation starts another server.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def run(self, argv: list[str], log_path: Path) -> int | None:
        """Exit code of `python -m expectations.checkpoint ARGV`, its output in `log_path`;
        None when the server died."""
        with self._lock:
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(json.dumps({"argv": argv, "log": str(log_path)}) + "\n")
                process.stdin.flush()
                crash_point("during_validation")
                reply = process.stdout.readline()
            except BrokenPipeError:
                reply = ""
            except BaseException:
                self._stop()
                raise
            if not reply:
                self._stop()
                return None
            return int(json.loads(reply)["exit"])

    def _running(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "expectations.server"],
                cwd=PROJECT_DIR,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                start_new_session=True,
            )
        return self._process

    def _stop(self) -> None:
        """Kill the server and any validation it forked (its process group)."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
            self._process = None


_VALIDATOR = _ValidatorServer()


def failure_summary(result: dict[str, Any]) -> str:
    """One readable clause per failed expectation: for a range, what was found and what
    was expected; then sample offending ids."""
    clauses = [
        f"{failure['suite']}: {failure['expectation']} ({failure['description']})"
        + (
            f": found {', '.join(map(_figure, failure['found']))}, expected "
            f"{_range_words(*failure['expected'])}"
            if failure.get("found") and any(bound is not None for bound in failure["expected"])
            else ""
        )
        + (f", sample: {', '.join(map(str, failure['sample']))}" if failure["sample"] else "")
        for failure in result.get("failures", [])
    ]
    return "validation failed: " + "; ".join(clauses or ["no result"])


def _figure(value: Any) -> str:
    """A count as a count (GX hands some back as floats: 59.0), grouped: 1,973."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _range_words(low: Any, high: Any) -> str:
    """`1,973`, `between 1 and 5`, `at least 1,896`, `at most 3`."""
    if low is not None and low == high:
        return _figure(low)
    if low is not None and high is not None:
        return f"between {_figure(low)} and {_figure(high)}"
    return f"at least {_figure(low)}" if low is not None else f"at most {_figure(high)}"


def resolve_artifact(settings: Settings, reference: str) -> tuple[str, Path]:
    """Turn a build id or an artifact path into `(build_id, path)` inside the artifact dir.

    Anything outside the artifact directory, a symlink, or a name that is not a final
    artifact name is refused: publishing may only ever point at a file this code sealed.
    """
    artifact_dir = settings.artifact_path.resolve()
    if files.is_build_id(reference):
        path = files.artifact_file(artifact_dir, reference)
    elif "/" not in reference and not reference.endswith(files.ARTIFACT_SUFFIX):
        raise SlackqueryError(
            f"no build {reference}: not a build id (YYYYmmddTHHMMSSZ-<hex8>-<hex8>, see "
            "`slackquery artifacts`) nor an artifact path"
        )
    else:
        # A bare file name means one in the artifact directory, wherever the command runs.
        candidate = artifact_dir / reference if "/" not in reference else Path(reference)
        if candidate.is_symlink():
            raise SlackqueryError(
                f"refusing {reference}: a symlink is not an artifact; name the build id "
                "(see `slackquery artifacts`)"
            )
        path = candidate.resolve()
        if path.parent != artifact_dir:
            raise SlackqueryError(
                f"refusing {reference}: artifacts must sit directly in {artifact_dir}"
            )
    build_id = files.build_id_of(path)
    if build_id is None:
        raise SlackqueryError(f"refusing {reference}: not a search-<build_id>.duckdb artifact")
    if path.is_symlink() or not path.is_file():
        raise SlackqueryError(
            f"no artifact file for build {build_id} in {artifact_dir} (retention removes "
            "old builds; `slackquery artifacts` lists the ones that can be published or "
            "rolled back to)"
        )
    return build_id, path


def seal_damage(artifact_dir: Path, build_id: str, path: Path) -> str | None:
    """How a sealed artifact's files differ from its seal (`verify_sealed`), or None."""
    try:
        verify_sealed(artifact_dir, build_id, path)
    except SlackqueryError as error:
        return str(error)
    return None


def verify_sealed(artifact_dir: Path, build_id: str, path: Path) -> dict[str, Any]:
    """Check the manifest, checksums and metadata of a sealed artifact and its arrays;
    return the manifest."""
    manifest_path = files.manifest_file(artifact_dir, build_id)
    if not manifest_path.is_file():
        raise SlackqueryError(f"build {build_id} has no manifest ({manifest_path.name})")
    try:
        manifest = files.read_json(manifest_path)
    except ValueError as error:
        raise SlackqueryError(f"manifest of build {build_id} is unreadable: {error}") from error
    if not isinstance(manifest, dict):
        raise SlackqueryError(f"manifest of build {build_id} is not a JSON object")
    if manifest.get("build_id") != build_id or manifest.get("artifact_file") != path.name:
        raise SlackqueryError(f"manifest of build {build_id} names another artifact")
    validation, counts = manifest.get("validation"), manifest.get("counts")
    if not isinstance(validation, dict) or validation.get("success") is not True:
        raise SlackqueryError(f"build {build_id} did not pass validation")
    files.require_checksum(path, manifest.get("checksum_sha256"), path.name)
    try:
        arrays.verify_sealed(files.arrays_dir_of(path), manifest.get("arrays"))
    except SlackqueryError as error:
        raise SlackqueryError(f"build {build_id} is not sealed: {error}") from error
    try:
        conn = open_database(str(path), read_only=True, what="artifact")
    except duckdb.Error as error:
        raise SlackqueryError(f"{path.name} does not open as DuckDB: {error}") from error
    try:
        row = conn.execute(
            "select build_id, source_watermark, generation_id, document_count "
            "from artifact_metadata"
        ).fetchall()
    except duckdb.Error as error:
        raise SlackqueryError(f"{path.name} has no readable artifact_metadata: {error}") from error
    finally:
        conn.close()
    expected = (
        build_id,
        manifest.get("source_watermark"),
        manifest.get("generation_id"),
        counts.get("document_count") if isinstance(counts, dict) else None,
    )
    if len(row) != 1 or tuple(row[0]) != expected:
        raise SlackqueryError(f"metadata of {path.name} does not match its manifest")
    crash_point("after_verify")
    return manifest
