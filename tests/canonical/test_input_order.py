"""Inputs in any order: an older export never undoes a later edit or deletion, a newer one
(or a sync page read later) still does. The importer's clock is fake (`clock`)."""

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slackquery.canonical.authors import Authors
from slackquery.canonical.importer import import_source
from slackquery.canonical.staging import Warnings
from slackquery.canonical.sync_store import SyncStore
from slackquery.settings import Settings
from tests.canonical.conftest import TEAM, default_members, msg, query, snapshot, write_export

EDITED = "1704200060.000200"  # general, 2024-01-02: edited in the newer export
DELETED = "1704200500.000001"  # secret, 2024-01-02: its day file is gone from the newer export
LATE = "1704390000.000001"  # eng, 2024-01-04 17:40: after everything in the older export


def _newer_members() -> dict[str, Any]:
    """The default export made on 2024-01-05: one edit, one deletion, three new messages."""
    members = default_members()
    edited = members["general/2024-01-02.json"][1]
    edited["text"] = "looking at it now"
    edited["edited"] = {"user": "U02", "ts": "1704460000.000000"}  # 2024-01-05 13:06
    del members["secret/2024-01-02.json"]
    # #secret is still covered (it has a day file); a conversation without any is not.
    members["secret/2024-01-05.json"] = [msg("1704456000.000003", "still private")]
    members["eng/2024-01-04.json"].append(msg(LATE, "late on the older export's last day"))
    members["general/2024-01-05.json"] = [msg("1704456000.000001", "new day")]
    return members


def _import_older_then_newer(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> tuple[Path, dict[str, Any]]:
    """Import the default export on 2024-01-05, the newer one on 2024-01-06."""
    older = write_export(tmp_path / "older.zip", default_members())
    clock("2024-01-05T00:00")
    import_source(settings, older)
    clock("2024-01-06T00:00")
    newer = import_source(settings, write_export(tmp_path / "newer.zip", _newer_members()))
    assert newer["counts"]["messages"]["tombstoned"] == 1
    assert _message(settings.canonical_path, DELETED)[2] is True
    return older, newer


def _message(db: Path, ts: str) -> tuple[Any, ...]:
    return query(db, "select text, is_edited, is_deleted from messages where ts = ?", [ts])[0]


def test_an_older_export_never_undoes_a_later_edit_or_deletion(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> None:
    older, _ = _import_older_then_newer(settings, tmp_path, clock)
    db = settings.canonical_path
    before = snapshot(db)
    clock("2024-01-07T00:00")
    again = import_source(settings, older)
    assert again["counts"]["messages"] == {
        "inserted": 0,
        "updated": 0,
        "unchanged": 10,
        "tombstoned": 0,
    }
    assert _message(db, EDITED) == ("looking at it now", True, False)
    assert _message(db, DELETED)[2] is True
    assert _message(db, LATE)[2] is False  # the older export may predate it: not a deletion
    after = snapshot(db)
    assert before is not None and after is not None
    assert len(after.pop("import_runs")) == len(before.pop("import_runs")) + 1
    assert after == before
    problems = {item["problem"] for item in again["warnings"]}
    assert problems == {
        f"1 message(s) (e.g. {TEAM}:C01:{EDITED}) not updated: the store holds a later edit of "
        "them",
        f"1 message(s) (e.g. {TEAM}:G01:{DELETED}) kept deleted: the deletion was recorded "
        "after this input's newest message or edit (2024-01-04 14:53:20 UTC), so the input may "
        "be older than the deletion; an input holding a later message would restore them",
    }


def test_an_export_made_after_a_deletion_restores_the_message(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> None:
    _import_older_then_newer(settings, tmp_path, clock)
    restored = _newer_members()
    restored["secret/2024-01-02.json"] = default_members()["secret/2024-01-02.json"]
    restored["general/2024-01-08.json"] = [msg("1704700000.000001", "posted after the deletion")]
    clock("2024-01-09T00:00")
    report = import_source(settings, write_export(tmp_path / "latest.zip", restored))
    assert report["counts"]["messages"]["updated"] == 1
    assert report["warning_count"] == 0
    assert _message(settings.canonical_path, DELETED)[2] is False


def _sync_page(settings: Settings, messages: list[dict[str, Any]], observed_at: str) -> None:
    """Merge one conversations.history page of #secret as `sync` does, read at `observed_at`."""
    writer = SyncStore(settings, f"sync-{observed_at}", Warnings())
    try:
        writer.write_page(
            TEAM,
            "G01",
            messages,
            authors=Authors({}, Warnings()),
            scope="history",
            next_cursor="more",
            observed_at=datetime.fromisoformat(observed_at).replace(tzinfo=UTC),
            where="slack:G01",
        )
    finally:
        writer.close()


def test_sync_applies_later_edits_and_undeletes_by_the_same_rules(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> None:
    _import_older_then_newer(settings, tmp_path, clock)
    db = settings.canonical_path
    deleted = default_members()["secret/2024-01-02.json"][0]
    _sync_page(settings, [deleted], "2024-01-05T12:00")  # read before the deletion was seen
    assert _message(db, DELETED)[2] is True
    first_edit = {**deleted, "text": "plans, v2", "edited": {"user": "U01", "ts": "1704900000.0"}}
    _sync_page(settings, [first_edit], "2024-01-11T00:00")
    assert _message(db, DELETED) == ("plans, v2", True, False)
    second_edit = {**first_edit, "text": "plans, v3", "edited": {"user": "U01", "ts": "1705000000"}}
    _sync_page(settings, [second_edit], "2024-01-12T00:00")
    _sync_page(settings, [first_edit], "2024-01-13T00:00")  # a stale copy, however late read
    assert _message(db, DELETED) == ("plans, v3", True, False)
    # Slack's deletion record of an edited message carries no `edited`, yet is not stale.
    tombstone = {**deleted, "subtype": "tombstone", "text": "This message was deleted."}
    _sync_page(settings, [tombstone], "2024-01-14T00:00")
    assert _message(db, DELETED)[2] is True


def test_a_timestamp_past_any_date_bounds_the_input_by_the_import_start(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> None:
    members = default_members()
    members["general/2024-01-03.json"].append(
        msg("1704290000.000009", "edited in the far future")
        | {"edited": {"user": "U01", "ts": "9000000000000.5"}}
    )
    clock("2024-01-05T00:00")
    report = import_source(settings, write_export(tmp_path / "future.zip", members))
    assert report["counts"]["messages"]["inserted"] == 11


def test_a_beacon_corpus_restores_a_message_it_lacked_before(
    settings: Settings, tmp_path: Path, clock: Callable[[str], None]
) -> None:
    # A corpus's dates are its story's, not its file's: the last import wins.
    lines = [
        {
            "local_id": str(n),
            "channel": "ops",
            "author": "ana",
            "created_at": f"2026-09-0{n}T10:00:00+05:30",
            "parent_id": None,
            "text": f"note {n}",
        }
        for n in (1, 2, 3)
    ]
    corpus = tmp_path / "story.jsonl"

    def load(rows: list[dict[str, Any]], day: str) -> dict[str, Any]:
        corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        clock(day)
        return import_source(settings, corpus, workspace_slug="story")

    load(lines, "2026-10-01T00:00")
    assert load([lines[0], lines[2]], "2026-10-02T00:00")["counts"]["messages"]["tombstoned"] == 1
    assert load(lines, "2026-10-03T00:00")["counts"]["messages"]["updated"] == 1
    deleted = query(settings.canonical_path, "select count(*) from messages where is_deleted")
    assert deleted == [(0,)]
