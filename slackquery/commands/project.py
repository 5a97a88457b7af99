"""`slackquery project`: run the dbt projection from canonical into the state database."""

import argparse

from slackquery.commands import add_json_flag, emit, shows_progress, writes_the_pipeline
from slackquery.projection import DOCUMENT_KINDS, project
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `project` subcommand."""
    parser = subparsers.add_parser(
        "project",
        help="project the canonical store into search documents (dbt build)",
        description="Run the dbt project (models and data tests) that turns the canonical "
        "Slack store, attached read-only, into search documents in the state database, then "
        "print document counts per kind (message, thread_context) and state (active, "
        "tombstoned). Incremental: only documents whose canonical inputs changed are "
        "rewritten; after an edit of the models, macros or data tests, or after a projection "
        "that failed or did not finish, every model is rebuilt from canonical instead (no "
        "re-embedding), and `build` refuses a state whose last projection did not succeed.",
    )
    parser.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild every incremental model from scratch (gives the same documents)",
    )
    parser.add_argument(
        "--skip-tests",
        action="store_true",
        help="run the models only (dbt run), without the dbt data tests: to repeat a "
        "projection whose tests passed (`build` refuses the state unless the last "
        "projection of these models that ran the tests passed them)",
    )
    parser.add_argument(
        "--unit-tests",
        action="store_true",
        help="also run the models' dbt unit tests (SQL checked against fixed inputs; for "
        "development, `make test` runs them)",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)
    writes_the_pipeline(parser, "a projection")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Project, then print the counts."""
    result = project(
        settings,
        full_refresh=args.full_refresh,
        progress=shows_progress(args),
        tests=not args.skip_tests,
        unit_tests=args.unit_tests,
    )
    emit(args, result, render(result))
    return 0


def render(result: dict) -> str:
    """Counts as a small aligned table."""
    lines = [f"{'kind':<16}{'active':>10}{'tombstoned':>12}"]
    documents = result["documents"]
    for kind in (*DOCUMENT_KINDS, *sorted(set(documents) - set(DOCUMENT_KINDS))):
        states = documents[kind]
        lines.append(f"{kind:<16}{states['active']:>10}{states['tombstoned']:>12}")
    reason = result.get("full_refresh_reason")
    mode = "incremental" if reason is None else f"full refresh: {reason}"
    lines.append(
        f"{result['total']} documents in {result['state_db']} ({mode}, {result['elapsed_s']:.1f} s)"
    )
    lines += [
        f"warning: {warned['test']}: {warned['message']} (the rows: the query in {warned['query']})"
        for warned in result["test_warnings"]
    ]
    return "\n".join(lines)
