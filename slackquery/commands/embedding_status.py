"""`slackquery embedding-status`: work items by state, generation identity and coverage.

Reads only (a read-only connection), and never contacts the embedding endpoint: an HTTP
model without a pinned revision is reported by the generations recorded in state. While an
embed run holds the state database, it reports what that run writes beside it
(`slackquery.embedding.run_progress`).
"""

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from slackquery.artifacts import files
from slackquery.commands import add_json_flag, emit
from slackquery.duckdb_setup import BusyDatabase
from slackquery.embedding import configured_identity
from slackquery.embedding import state as work_state
from slackquery.embedding.run_progress import running_embed
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `embedding-status` subcommand."""
    parser = subparsers.add_parser(
        "embedding-status",
        help="report embedding work by state, generation and coverage",
        description="Report, for the configured embedding generation, how many active "
        "message documents have a vector at their current text (coverage), work items by "
        "state (in_progress items of a run that ended counted apart), the last errors, the "
        "projected time to full coverage at the rate measured over the last runs, and every "
        "generation recorded in the state database. While an embed run holds the state "
        "database, its progress (items done, rate, time left).",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def _empty_report(settings: Settings) -> dict[str, Any]:
    identity = configured_identity(settings)
    return {
        "state_db": str(settings.state_path),
        "configured_generation": identity.to_dict() if identity else None,
        "generations": [],
    }


def _running_report(settings: Settings, running: dict[str, Any]) -> dict[str, Any]:
    """The report while an embed run holds the state database (for hours): what it last
    wrote beside it."""
    return _empty_report(settings) | {
        "running_embed": running,
        "note": f"an embed run (PID {running['pid']}) is writing the state database: its "
        "progress follows; the full report once it ends",
    }


def status(settings: Settings) -> dict[str, Any]:
    """The status report as a dict (the CLI prints it; tests and reconcile read it)."""
    result = _empty_report(settings)
    configured_id = (result["configured_generation"] or {}).get("generation_id")
    if not settings.state_path.exists():
        result["note"] = "no state database yet"
        return result
    try:
        connection = work_state.connect(settings.state_path, read_only=True)
    except BusyDatabase as busy:
        running = running_embed(settings.state_path, busy.holder_pid)
        if running is None:
            raise
        return _running_report(settings, running)
    try:
        if not work_state.has_table(connection, "embedding_generations"):
            result["note"] = "nothing embedded yet"
            return result
        has_documents = work_state.has_table(connection, "search_documents")
        rows = connection.execute(
            "select generation_id, identity_json, created_at from embedding_generations "
            "order by created_at"
        ).fetchall()
        for generation_id, identity_json, created_at in rows:
            entry: dict[str, Any] = {
                "generation_id": generation_id,
                "identity": json.loads(identity_json),
                "created_at": created_at,
                "is_configured": generation_id == configured_id,
            }
            if has_documents:
                entry["counts"] = work_state.state_counts(connection, generation_id)
                entry["abandoned_in_progress"] = work_state.abandoned_claims(
                    connection, generation_id, datetime.now(UTC)
                )
                entry.update(work_state.coverage(connection, generation_id))
                # terminal_failed items are never claimed again unless asked for.
                claimable = entry["missing_documents"] - entry["counts"]["terminal_failed"]
                entry.update(projection(connection, generation_id, claimable))
                entry["recent_errors"] = [
                    {"document_id": doc, "state": st, "error_class": cls, "error_message": msg}
                    for doc, st, cls, msg in connection.execute(
                        "select document_id, state, error_class, error_message "
                        "from embedding_work_items where generation_id = ? "
                        "and state in ('retryable_failed', 'terminal_failed') "
                        "order by updated_at desc, document_id limit 5",
                        [generation_id],
                    ).fetchall()
                ]
            result["generations"].append(entry)
    finally:
        connection.close()
    return result


def projection(connection: Any, generation_id: str, missing: int) -> dict[str, Any]:
    """Time to embed the `missing` documents runs will claim (all but terminal_failed) at
    the rate measured over the generation's last runs."""
    rate = work_state.measured_rate(connection, generation_id)
    return {
        "measured_docs_per_s": round(rate, 2) if rate else None,
        "projected_s_to_full_coverage": round(missing / rate, 1) if rate else None,
    }


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _running(report: dict[str, Any]) -> str:
    """A running embed's progress in one line: counts, rate and time left at that rate."""
    started = datetime.fromisoformat(report["started_at"])
    updated = datetime.fromisoformat(report["updated_at"])
    elapsed = (updated - started).total_seconds()
    done = report["succeeded"] + report["failed"]
    line = (
        f"since {report['started_at']}: {done} of {report['claimable']} items done "
        f"({report['succeeded']} succeeded, {report['failed']} failed) as of "
        f"{report['updated_at']}"
    )
    if elapsed > 0 and done:
        rate = report["succeeded"] / elapsed
        left = max(0, report["claimable"] - done)
        line += f"; {rate:.1f} docs/s"
        if rate > 0:
            line += f", about {_duration(left / rate)} left"
    return line


def _format(result: dict[str, Any]) -> str:
    configured = result["configured_generation"]
    lines = [
        f"state db     {result['state_db']}",
        "configured   "
        + (configured["generation_id"] if configured else "(resolved from the endpoint)"),
    ]
    if "note" in result:
        lines.append(f"note         {result['note']}")
    if "running_embed" in result:
        lines.append(f"running      {_running(result['running_embed'])}")
    for entry in result["generations"]:
        marker = "*" if entry["is_configured"] else " "
        lines.append(f"{marker} {entry['generation_id']}")
        if "counts" in entry:
            lines.append(
                "    " + ", ".join(f"{state} {count}" for state, count in entry["counts"].items())
            )
            lines.append(
                f"    coverage {entry['embedded_documents']}/{entry['wanted_documents']} "
                f"({entry['coverage']:.1%})"
            )
            rate = entry["measured_docs_per_s"]
            terminal = entry["counts"]["terminal_failed"]
            claimable = entry["missing_documents"] - terminal
            if claimable and rate:
                lines.append(
                    f"    projected {_duration(entry['projected_s_to_full_coverage'])} to embed "
                    f"the {claimable} missing at {rate} docs/s (measured over the last runs)"
                )
            elif claimable:
                lines.append("    projected: unknown until a run has embedded something")
            if entry["abandoned_in_progress"]:
                lines.append(
                    f"    {entry['abandoned_in_progress']} in_progress of runs that ended (killed, "
                    "or past their lease): the next embed run claims them again"
                )
            if terminal:
                lines.append(
                    f"    {terminal} terminal_failed: never claimed again; "
                    "`slackquery embed --retry-failed` tries them again"
                )
            for error in entry["recent_errors"]:
                lines.append(
                    f"    {error['state']} {error['document_id']}: "
                    f"{error['error_class']}: {error['error_message']}"
                )
    return "\n".join(lines)


def run(args: argparse.Namespace, settings: Settings) -> None:
    """Print the status report; while a pipeline command or reconcile writes the state
    database, the progress of its embed run, without opening the database."""
    holder = files.pipeline_holder(settings.home)
    result = status(settings) if holder is None else _while_written(settings, holder)
    emit(args, result, _format(result))


def _while_written(settings: Settings, holder: str) -> dict[str, Any]:
    running = running_embed(settings.state_path, files.holder_pid(holder))
    if running is None:
        raise SlackqueryError(f"{holder} holds the state database: the report once it is done")
    return _running_report(settings, running)
