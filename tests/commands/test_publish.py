"""`slackquery publish` and `rollback` speak build ids, and say when the build was
already the current one."""

from typing import Any

import pytest

from slackquery.cli import main

CURRENT = "20250101T000000Z-aaaaaaaa-00000001"
OLDER = "20241231T000000Z-bbbbbbbb-00000002"


def result(build_id: str, previous: str | None, *, reused: bool = True) -> dict[str, Any]:
    return {
        "build_id": build_id,
        "previous": None if previous is None else f"search-{previous}.duckdb",
        "validation": {"success": True, "reused": reused},
        "retention": {"removed": []},
    }


@pytest.fixture
def outcome(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the faked publish and rollback return: set `outcome["result"]` in a test."""
    holder: dict[str, Any] = {}
    monkeypatch.setattr("slackquery.commands.publish.publish", lambda s, b: holder["result"])
    monkeypatch.setattr("slackquery.commands.rollback.rollback", lambda s, b: holder["result"])
    return holder


@pytest.mark.parametrize(
    ("command", "returned", "line"),
    [
        (
            "publish",
            result(CURRENT, OLDER, reused=False),
            f"published {CURRENT} (validated; previous: {OLDER})",
        ),
        (
            "publish",
            result(CURRENT, None),
            f"published {CURRENT} (build's validation reused; previous: none)",
        ),
        (
            "publish",
            result(CURRENT, CURRENT),
            f"{CURRENT} was already published and stays current (seal re-checked, its "
            "validation still holds)",
        ),
        (
            "publish",
            result(CURRENT, CURRENT, reused=False),
            f"{CURRENT} was already published and stays current (seal re-checked, validated again)",
        ),
        (
            "rollback",
            result(OLDER, CURRENT, reused=False),
            f"rolled back to {OLDER} (was: {CURRENT})",
        ),
        (
            "rollback",
            result(CURRENT, CURRENT, reused=False),
            f"{CURRENT} was already current and stays so (seal re-checked, validated again)",
        ),
    ],
)
def test_the_line_names_builds_by_id(
    command: str,
    returned: dict[str, Any],
    line: str,
    outcome: dict[str, Any],
    home: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome["result"] = returned
    assert main([command, returned["build_id"]]) == 0
    out = capsys.readouterr().out
    assert out == line + "\n"
    assert ".duckdb" not in out
