"""`slackquery import PATH`: load a Slack export or Beacon JSON lines into the canonical store."""

import argparse
from typing import Any

from slackquery.canonical.importer import import_source
from slackquery.canonical.sources import SOURCE_FORMATS
from slackquery.commands import add_json_flag, emit
from slackquery.escaping import terminal_line
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `import` subcommand."""
    parser = subparsers.add_parser(
        "import",
        help="import a Slack export (ZIP or folder) or Beacon JSON lines into the canonical store",
        description="Import one input into the canonical DuckDB (SLACKQUERY_CANONICAL_DB) as one "
        "atomic run. Accepts a Slack export ZIP or unpacked folder (standard or slackdump "
        "layout) and the Beacon JSON-lines chat format. Re-importing the same input changes "
        "nothing; a newer export updates changed messages, adds new ones and marks messages "
        "missing from the days it covers as deleted, while an older one never undoes a later "
        "edit or deletion. On any error the store is unchanged.",
    )
    parser.add_argument("path", help="export ZIP, unpacked export folder, or .jsonl file")
    parser.add_argument(
        "--format",
        dest="source_format",
        choices=SOURCE_FORMATS,
        help="input format (default: detected; .jsonl/.ndjson files are beacon-jsonl)",
    )
    parser.add_argument(
        "--workspace-slug",
        help="workspace subdomain used in permalinks (<slug>.slack.com); default: kept from "
        "an earlier import, else derived from the file or folder name",
    )
    parser.add_argument(
        "--workspace-name",
        help="workspace display name; default: kept from an earlier import, else derived from "
        "the export's file name",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Import and print the run report."""
    report = import_source(
        settings,
        args.path,
        source_format=args.source_format,
        workspace_slug=args.workspace_slug,
        workspace_name=args.workspace_name,
    )
    emit(args, report, render(report))
    return 0


def render(report: dict[str, Any]) -> str:
    """The human-readable report: one line per table, then the warnings."""
    workspace = report["workspace"]
    lines = [
        f"import run {report['run_id']}: {workspace['workspace_name']} "
        f"({workspace['workspace_id']}, {workspace['workspace_url']}) from "
        f"{report['source_format']} in {report['duration_s']} s "
        f"({report['messages_per_s']} messages/s)",
    ]
    if workspace["slug_source"] == "the file name":
        lines.append(
            f"  slug {workspace['workspace_slug']!r} is the file name's: permalinks point to "
            f"{workspace['workspace_url']}; import again with --workspace-slug (your Slack "
            "domain) if that is not it"
        )
    if workspace["renamed"]:
        lines.append(
            f"  workspace now {workspace['workspace_slug']} ({workspace['workspace_name']}): "
            "permalinks follow from the next `slackquery project`"
        )
    lines.extend(render_counts(report["counts"]))
    if report["messages_skipped"]:
        lines.append(f"  skipped {report['messages_skipped']:,} message(s)")
    if not report["changed"]:
        lines.append("  no changes (already imported)")
    held = report["store"]
    lines.append(
        f"store now holds {held['workspaces']} workspace(s), {held['channels']:,} channels, "
        f"{held['users']:,} users, {held['messages']:,} messages in {held['threads']:,} "
        f"threads, {held['first_date']} to {held['last_date']}"
    )
    if report["warning_count"]:
        lines.append(f"warnings: {report['warning_count']:,}")
        lines.extend(f"  {item['file']}: {item['problem']}" for item in report["warnings"][:20])
        if report["warning_count"] > 20:
            lines.append(f"  … {report['warning_count'] - 20:,} more (see --json)")
    # Names and warnings quote the input: escaped for the terminal.
    return "\n".join(map(terminal_line, lines))


def render_counts(counts: dict[str, dict[str, int]]) -> list[str]:
    """One line per table: inserted / updated / unchanged / tombstoned (import and sync)."""
    return [
        f"  {table:<9} inserted {row['inserted']:>9,}  updated {row['updated']:>9,}  "
        f"unchanged {row['unchanged']:>9,}  tombstoned {row['tombstoned']:>9,}"
        for table, row in counts.items()
    ]
