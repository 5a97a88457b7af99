"""Re-projection after a small canonical change rewrites only what changed."""

import shutil
from pathlib import Path

import duckdb

from slackquery.projection import project
from slackquery.settings import Settings
from tests.models.canonical_fixture import ROOT_TS, WORKSPACE, payload_hash
from tests.models.conftest import Projected, documents, settings_for

EDITED_REPLY = f"{WORKSPACE}:C0INCIDENT:1700000160.000200"
THREAD_CONTEXT = f"thread:{WORKSPACE}:C0INCIDENT:{ROOT_TS}"
MARKER = "not rewritten"


def edit_message(canonical: Path, message_key: str, text: str) -> None:
    """Change one message's text and payload hash, as a re-import of an edit would."""
    connection = duckdb.connect(str(canonical))
    try:
        row = connection.execute(
            "select text, payload_hash from messages where message_key = ?", [message_key]
        ).fetchone()
        assert row is not None
        new_hash = payload_hash({"message_key": message_key, "text": text, "old": row[1]})
        connection.execute(
            "update messages set text = ?, search_text = ?, is_edited = true, "
            "payload_hash = ?, last_changed_at = now() where message_key = ?",
            [text, text, new_hash, message_key],
        )
    finally:
        connection.close()


def mark_every_permalink(state: Path) -> None:
    """Overwrite every document's permalink with a marker only a rewrite of the row removes.

    The permalink is not among the inputs the incremental mart compares, so a marker
    that survives re-projection proves the row was not rewritten.
    """
    connection = duckdb.connect(str(state))
    try:
        connection.execute("update search_documents set permalink = ?", [MARKER])
    finally:
        connection.close()


def copy_projection(projected: Projected, home: Path) -> Settings:
    """A private copy of the session's canonical and state DBs under a new home."""
    home.mkdir()
    settings = settings_for(home)
    shutil.copy(projected.settings.canonical_path, settings.canonical_path)
    shutil.copy(projected.settings.state_path, settings.state_path)
    return settings


def test_edit_rewrites_one_message_and_its_thread_context(
    projected: Projected, tmp_path: Path
) -> None:
    settings = copy_projection(projected, tmp_path / "home")
    original = documents(settings)
    mark_every_permalink(settings.state_path)

    edit_message(settings.canonical_path, EDITED_REPLY, "rotated the password <@U0ZOE>")
    project(settings, tests=False)
    after = documents(settings)

    rewritten = {doc_id for doc_id, doc in after.items() if doc["permalink"] != MARKER}
    assert rewritten == {EDITED_REPLY, THREAD_CONTEXT}
    before = original
    assert after[EDITED_REPLY]["text_display"] == "rotated the password @Zoë"
    assert after[EDITED_REPLY]["text_hash"] != before[EDITED_REPLY]["text_hash"]
    assert after[THREAD_CONTEXT]["text_hash"] != before[THREAD_CONTEXT]["text_hash"]
    assert "Annie: rotated the password @Zoë" in after[THREAD_CONTEXT]["text_display"]

    project(settings, full_refresh=True, tests=False)
    refreshed = documents(settings)
    for doc_id, doc in after.items():
        if doc_id not in rewritten:
            doc = {**doc, "permalink": original[doc_id]["permalink"]}
        assert refreshed[doc_id] == doc
    assert refreshed.keys() == after.keys()


def test_no_change_rewrites_nothing(projected: Projected) -> None:
    before = documents(projected.settings)
    result = project(projected.settings, tests=False)
    assert result["documents"] == projected.result["documents"]
    assert documents(projected.settings) == before


def test_user_rename_reaches_mentions_and_thread_context(
    projected: Projected, tmp_path: Path
) -> None:
    settings = copy_projection(projected, tmp_path / "home")
    connection = duckdb.connect(str(settings.canonical_path))
    try:
        connection.execute(
            "update users set display_name = 'Ann L.', payload_hash = 'renamed', "
            "last_changed_at = now() where user_id = 'U024BE7LH'"
        )
    finally:
        connection.close()
    mark_every_permalink(settings.state_path)
    project(settings, tests=False)
    after = documents(settings)
    root = f"{WORKSPACE}:C0INCIDENT:{ROOT_TS}"
    assert after[root]["text_display"] == "db down: error 28P01 for @Ann L."
    assert after[EDITED_REPLY]["author_name"] == "Ann L."
    assert "Ann L.: rotating the password now" in after[THREAD_CONTEXT]["text_display"]
    assert after[f"{WORKSPACE}:C0MPIM:1700000600.000100"]["permalink"] == MARKER


def test_full_refresh_matches_incremental_state(projected: Projected) -> None:
    before = documents(projected.settings)
    project(projected.settings, full_refresh=True, tests=False)
    assert documents(projected.settings) == before


def test_deleted_reply_leaves_its_thread_context(projected: Projected, tmp_path: Path) -> None:
    """A re-import tombstones a vanished reply without changing its payload hash."""
    settings = copy_projection(projected, tmp_path / "home")
    assert EDITED_REPLY in documents(settings)[THREAD_CONTEXT]["message_ids"]
    connection = duckdb.connect(str(settings.canonical_path))
    try:
        connection.execute(
            "update messages set is_deleted = true, last_changed_at = now() where message_key = ?",
            [EDITED_REPLY],
        )
    finally:
        connection.close()

    project(settings, tests=False)
    after = documents(settings)
    assert not after[EDITED_REPLY]["is_active"]
    assert EDITED_REPLY not in after[THREAD_CONTEXT]["message_ids"]
    assert "Annie:" not in after[THREAD_CONTEXT]["text_display"]


def test_root_edit_re_embeds_its_replies(projected: Projected, tmp_path: Path) -> None:
    """A reply's embedding text quotes its root, so a root edit must rewrite the replies."""
    settings = copy_projection(projected, tmp_path / "home")
    root = f"{WORKSPACE}:C0INCIDENT:{ROOT_TS}"
    original = documents(settings)
    replies = {
        doc_id
        for doc_id, doc in original.items()
        if doc["thread_root_id"] == root and doc_id not in (root, THREAD_CONTEXT)
    }
    assert EDITED_REPLY in replies
    assert "(in reply to " in original[EDITED_REPLY]["text_embedding"]
    mark_every_permalink(settings.state_path)

    edit_message(settings.canonical_path, root, "db down again: error 08006")
    project(settings, tests=False)
    after = documents(settings)

    rewritten = {doc_id for doc_id, doc in after.items() if doc["permalink"] != MARKER}
    assert rewritten == {root, THREAD_CONTEXT} | replies
    for reply in replies:
        assert after[reply]["text_embedding"].endswith(": db down again: error 08006)")
        assert after[reply]["text_hash"] != original[reply]["text_hash"]


def test_a_document_whose_lexical_text_alone_differs_is_rewritten(
    projected: Projected, tmp_path: Path
) -> None:
    # What BM25 indexes can change alone: a mention in attachment text renders anew when
    # its channel is renamed or made private, while the displayed text stays the same.
    settings = copy_projection(projected, tmp_path / "home")
    original = documents(settings)[EDITED_REPLY]["text_lexical"]
    connection = duckdb.connect(str(settings.state_path))
    try:
        connection.execute(
            "update search_documents set text_lexical = 'stale' where document_id = ?",
            [EDITED_REPLY],
        )
    finally:
        connection.close()
    project(settings, tests=False)
    assert documents(settings)[EDITED_REPLY]["text_lexical"] == original
