"""Docs that must stay in step with the code (datasette's habit of testing its docs)."""

import re
from pathlib import Path

import yaml

from slackquery.cli import build_parser
from slackquery.commands.show_settings import markdown_reference

ROOT = Path(__file__).resolve().parents[1]


def test_settings_reference_is_current() -> None:
    documented = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert documented == markdown_reference(), (
        "docs/settings.md is stale: run `slackquery settings --markdown > docs/settings.md`"
    )


def test_readme_mentions_every_subcommand() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("# Slackquery\n\n```sh\nmake demo")
    subcommands = build_parser()._subparsers._group_actions[0].choices
    missing = [name for name in subcommands if f"slackquery {name}" not in readme]
    assert not missing, f"README does not show: {missing}"


def test_every_dbt_macro_is_documented() -> None:
    defined = {
        match.group(1)
        for path in (ROOT / "macros").rglob("*.sql")
        for match in re.finditer(r"{%-?\s*macro\s+(\w+)\(", path.read_text(encoding="utf-8"))
    }
    documented = yaml.safe_load((ROOT / "macros" / "_macros.yml").read_text(encoding="utf-8"))
    described = {macro["name"] for macro in documented["macros"] if macro.get("description")}
    assert defined == described
