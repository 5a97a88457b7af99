"""`make demo`: the main job end to end on the bundled sample workspace.

Runs the same CLI commands a user would, in order, so the demo shows their real output:
generate the sample export, import it, project it with dbt, embed it (resumable; a Prefect
flow run when PREFECT_API_URL is set), build a validated artifact, publish it, then run four
example searches and answer one question with citations.
"""

import shlex
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.rule import Rule

from slackquery.cli import main as slackquery
from slackquery.settings import get_settings

SAMPLE_MESSAGES = 2_000

EXAMPLE_QUERIES: tuple[tuple[str, ...], ...] = (
    # An error code, hybrid by default: the messages holding the identifier (the lexical
    # arm), beside ones near it in meaning (`--mode lexical` keeps only exact matches).
    ("search", "28P01", "--limit", "3"),
    # A paraphrased question that shares few words with the answer.
    (
        "search",
        "how many calls can an integration make each minute before it gets throttled?",
        "--limit",
        "3",
    ),
    # Slack's own search syntax: channel and date filters inside the query.
    ("search", "in:#incidents after:2024-03-01 database outage", "--limit", "3"),
    # Operators alone: what was said in a channel, newest first.
    ("search", "in:#incidents", "--limit", "3"),
    # An extractive answer, every claim cited, or "the archive does not answer".
    ("ask", "Who is covering the Postgres 16 upgrade while Zoë is away?"),
)


def _step(console: Console, argv: Sequence[str]) -> None:
    """Run one `slackquery` command, echoing it first (whole, so it can be copied); stop
    the demo if it fails."""
    console.print(Rule())
    console.print(f"$ slackquery {shlex.join(argv)}", markup=False, highlight=False, soft_wrap=True)
    status = slackquery(list(argv))
    if status:
        console.print(f"[red]demo stopped: `slackquery {argv[0]}` exited with {status}")
        sys.exit(status)


def run_demo() -> None:
    """Generate, import, project, embed, build, publish, then search the sample workspace
    and answer a question from it."""
    settings = get_settings()
    console = Console()
    sample_zip = settings.home / "sample" / "fjordline-export.zip"
    console.print(f"Slackquery demo in {settings.home.resolve()}")
    steps: list[tuple[str, ...]] = [
        ("sample", "--messages", str(SAMPLE_MESSAGES), "--out", str(sample_zip)),
        (
            "import",
            str(sample_zip),
            "--workspace-slug",
            "fjordline",
            "--workspace-name",
            "Fjordline Labs",
        ),
        ("project",),
        ("embed",),
        ("build",),
        ("publish", "latest"),
        ("artifacts",),
        *EXAMPLE_QUERIES,
    ]
    for argv in steps:
        _step(console, argv)
    console.print(Rule("[bold green]demo complete"))
    console.print(
        "Try your own: SLACKQUERY_HOME="
        f"{settings.home} .venv/bin/slackquery search 'your question'  "
        "(or `slackquery ask` for a cited answer, `slackquery serve` for the MCP server; "
        "see docs/mcp.md)",
        soft_wrap=True,  # whole, so the command can be copied
    )


if __name__ == "__main__":
    run_demo()
