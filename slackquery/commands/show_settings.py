"""`slackquery settings`: every setting, its environment variable, value and meaning."""

import argparse

from slackquery.commands import add_json_flag, emit
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `settings` subcommand."""
    parser = subparsers.add_parser(
        "settings",
        help="show every setting with its environment variable and current value",
        description="Show every setting, the SLACKQUERY_* environment variable that sets it, "
        "its current value and what it does. Paths default to places under SLACKQUERY_HOME.",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def describe(settings: Settings) -> list[dict[str, str]]:
    """One row per setting: name, environment variable, current value, description."""
    resolved = {
        "canonical_db": settings.canonical_path,
        "state_db": settings.state_path,
        "artifact_dir": settings.artifact_path,
        "log_dir": settings.log_path,
    }
    rows = []
    for name, field in Settings.model_fields.items():
        value = resolved.get(name, getattr(settings, name))
        if name.endswith(("_token", "_secret", "_api_key")) and value:
            value = "***"
        rows.append(
            {
                "name": name,
                "env": f"SLACKQUERY_{name.upper()}",
                "value": str(value),
                "description": field.description or "",
            }
        )
    return rows


def run(args: argparse.Namespace, settings: Settings) -> None:
    """Print the settings table."""
    rows = describe(settings)
    text = "\n".join(f"{row['env']}={row['value']}\n    {row['description']}" for row in rows)
    emit(args, rows, text)
