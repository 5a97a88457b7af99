"""What an export covers, and so may tombstone: only conversation-days it really holds.

A stored message is tombstoned only when the new export has day files of its conversation
(found and matched, however the folder is written) and held nothing skipped in its place.
"""

import os
import shutil
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from slackquery.canonical.importer import import_source
from slackquery.canonical.rows import LAST_STORABLE_US
from slackquery.settings import Settings
from tests.canonical.conftest import CHANNELS, default_members, msg, query, write_export

ENG = "T0TEST:C02:1704380000.000001"  # eng's only message (eng/2024-01-04.json)
MPIM = "mpdm-alice--bob--chloé-1"  # a folder name with a non-ASCII letter


def _deleted(settings: Settings) -> list[tuple[Any, ...]]:
    return query(settings.canonical_path, "select message_key from messages where is_deleted")


def _problems(report: dict[str, Any]) -> list[str]:
    return [item["problem"] for item in report["warnings"]]


def test_a_listed_conversation_without_day_files_is_not_covered(
    settings: Settings, tmp_path: Path
) -> None:
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    members = default_members()
    del members["eng/2024-01-04.json"]  # the folder is gone, #eng is still listed
    report = import_source(settings, write_export(tmp_path / "acme-2.zip", members))
    assert report["counts"]["messages"]["tombstoned"] == 0
    assert _deleted(settings) == []
    assert report["warnings"] == [
        {
            "file": "acme-2.zip:channels.json",
            "problem": "1 listed conversation(s) have no day files in the export (folder "
            "'eng'): none of their stored messages is tombstoned",
        }
    ]


def test_a_folder_name_in_nfd_matches_its_nfc_list_name(settings: Settings, tmp_path: Path) -> None:
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    members = {
        name.replace(MPIM, unicodedata.normalize("NFD", MPIM)): value
        for name, value in default_members().items()
    }
    assert f"{MPIM}/2024-01-03.json" not in members  # written decomposed, as macOS tools do
    report = import_source(settings, write_export(tmp_path / "acme-mac.zip", members))
    assert report["counts"]["messages"]["unchanged"] == 10
    assert report["counts"]["messages"]["tombstoned"] == 0
    assert report["warning_count"] == 0


def test_a_symlinked_conversation_folder_is_followed(settings: Settings, tmp_path: Path) -> None:
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    folder = write_export(tmp_path / "acme", default_members(), as_zip=False)
    shutil.move(folder / "eng", tmp_path / "eng-elsewhere")
    os.symlink(tmp_path / "eng-elsewhere", folder / "eng")
    os.symlink("..", folder / "general" / "loop")  # a link to a folder holding it
    report = import_source(settings, folder)
    assert report["counts"]["messages"]["unchanged"] == 10
    assert report["counts"]["messages"]["tombstoned"] == 0
    assert report["warnings"] == [
        {
            "file": "acme:general/loop/",
            "problem": "a link to a folder that contains it: not followed",
        }
    ]


def test_a_channel_name_with_a_slash_has_its_day_files_a_level_deeper(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    members["channels.json"] = [CHANNELS[0], {**CHANNELS[1], "name": "eng/core"}]
    members["eng/core/2024-01-04.json"] = members.pop("eng/2024-01-04.json")
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["warning_count"] == 0
    assert query(
        settings.canonical_path,
        "select message_key from messages where ts = ?",
        ["1704380000.000001"],
    ) == [(ENG,)]


def test_day_files_in_an_unexpected_place_are_warned_about(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    members["general/old/2024-01-02.json"] = [msg("1704200900.000001", "nested")]
    members["2024-01-02.json"] = [msg("1704200900.000002", "at the top")]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["warnings"] == [
        {"file": "acme.zip:", "problem": "1 day file(s) outside any conversation folder: skipped"},
        {
            "file": "acme.zip:general/old/",
            "problem": "unknown conversation 'general/old' (not in any conversation list): "
            "1 day file(s) skipped",
        },
    ]


def test_a_day_file_named_with_backslashes_is_warned_about(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    members["eng\\2024-01-05.json"] = [msg("1704470000.000001", "written on Windows")]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["warnings"] == [
        {
            "file": "acme.zip:eng\\2024-01-05.json",
            "problem": "a day file named with backslashes, not `/`: not read (re-create the "
            "ZIP with `/` separators, or import the unpacked folder)",
        }
    ]


def test_the_listed_folder_wins_over_one_named_by_the_conversation_id(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    members["C01/2024-01-02.json"] = [
        msg("1704200060.000200", "a copy in a folder named by the id"),
        msg("1704200900.000001", "only in the id folder"),
    ]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["warnings"] == [
        {
            "file": "acme.zip:C01/2024-01-02.json",
            "problem": "duplicate message ts=1704200060.000200 skipped",
        }
    ]
    assert query(
        settings.canonical_path,
        "select ts, text from messages where channel_id = 'C01' and conversation_day = ? "
        "order by ts",
        ["2024-01-02"],
    ) == [
        ("1704200000.000100", "Deploy v2.3.1 failed with ERR-42"),
        ("1704200060.000200", "looking at it"),
        ("1704200120.000300", "fixed: password auth 28P01"),
        ("1704200900.000001", "only in the id folder"),
    ]


@pytest.mark.parametrize(
    ("odd", "problem"),
    [
        ({"ts": None}, "message without a valid ts (None) skipped"),
        ({"ts": "1704200060.0002001"}, "message without a valid ts ('1704200060.0002001') skipped"),
        # From 2**32 s (2106) on, a double no longer tells microseconds apart.
        ({"ts": 4294967296.5}, "message without a valid ts (4294967296.5) skipped"),
        (42, "entry that is not a JSON object skipped"),
    ],
    ids=["no-ts", "ts-7-decimals", "inexact-number", "not-an-object"],
)
def test_a_message_skipped_for_its_ts_keeps_its_days_stored_messages(
    settings: Settings, tmp_path: Path, odd: Any, problem: str
) -> None:
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    members = default_members()
    day = members["general/2024-01-02.json"]
    day[1] = {**day[1], **odd} if isinstance(odd, dict) else odd
    report = import_source(settings, write_export(tmp_path / "acme-2.zip", members))
    assert _problems(report) == [problem]
    assert report["messages_skipped"] == 1
    assert report["counts"]["messages"]["tombstoned"] == 0
    # Only that conversation-day is held back: a vanished message elsewhere still goes.
    members["general/2024-01-03.json"].pop()
    report = import_source(settings, write_export(tmp_path / "acme-3.zip", members))
    assert report["counts"]["messages"]["tombstoned"] == 1
    assert _deleted(settings) == [("T0TEST:C01:1704290200.000003",)]


@pytest.mark.parametrize(
    ("number", "ts"),
    [(1704200060.0002, "1704200060.000200"), (1704200060, "1704200060.000000")],
    ids=["float", "integer"],
)
def test_a_ts_written_as_an_exact_number_is_the_same_message(
    settings: Settings, tmp_path: Path, number: float, ts: str
) -> None:
    members = default_members()
    members["general/2024-01-02.json"][1]["ts"] = ts
    import_source(settings, write_export(tmp_path / "acme.zip", members))
    members["general/2024-01-02.json"][1]["ts"] = number
    members["general/2024-01-02.json"][0]["thread_ts"] = 1704200000.0001  # the parent's
    report = import_source(settings, write_export(tmp_path / "acme-2.zip", members))
    assert report["warning_count"] == 0
    assert report["counts"]["messages"]["inserted"] == 0
    assert report["counts"]["messages"]["tombstoned"] == 0
    assert query(
        settings.canonical_path,
        "select ts_us, is_deleted from messages where message_key = ?",
        [f"T0TEST:C01:{ts}"],
    ) == [(round(number * 1_000_000), False)]
    assert query(
        settings.canonical_path,
        "select thread_ts, is_thread_parent from messages where ts = '1704200000.000100'",
    ) == [("1704200000.000100", True)]


def test_a_ts_spelled_another_way_is_the_same_message(settings: Settings, tmp_path: Path) -> None:
    import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    members = default_members()
    day = members["general/2024-01-02.json"]
    day[1] = {**day[1], "ts": "01704200060.0002", "thread_ts": "1704200000.0001"}
    day.append(msg("01704200120.000300", "a second copy, spelled otherwise"))
    day.append(msg("1.2", "early"))
    report = import_source(settings, write_export(tmp_path / "acme-2.zip", members))
    assert _problems(report) == [
        "duplicate message ts=1704200120.000300 (written '01704200120.000300') skipped"
    ]
    assert report["counts"]["messages"]["inserted"] == 1
    assert report["counts"]["messages"]["tombstoned"] == 0
    assert query(
        settings.canonical_path,
        "select ts, thread_ts, is_thread_reply from messages "
        "where channel_id = 'C01' and ts_us < 1704200100000000 order by ts_us",
    ) == [
        ("1.200000", None, False),
        ("1704200000.000100", "1704200000.000100", False),
        ("1704200060.000200", "1704200000.000100", True),
    ]


@pytest.mark.parametrize("ts", ["253402300800.000000", "99999999999999999999.000000"])
def test_a_ts_no_datetime_can_hold_is_skipped_with_a_warning(
    settings: Settings, tmp_path: Path, ts: str
) -> None:
    members = default_members()
    members["general/2024-01-02.json"].append(msg(ts, "from the far future"))
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert _problems(report) == [f"message ts={ts} lies after the year 9999: skipped"]
    assert report["counts"]["messages"]["inserted"] == 10
    assert report["store"]["last_date"] == "2024-01-04"
    assert query(
        settings.canonical_path, "select count(*) from messages where ts_us > ?", [LAST_STORABLE_US]
    ) == [(0,)]
