"""The search documents dbt projects from the fixture canonical store."""

import hashlib
import json

from tests.models.canonical_fixture import ROOT_TS, WORKSPACE
from tests.models.conftest import Projected, documents, file_sha256

GENERAL = f"{WORKSPACE}:C0GENERAL"
INCIDENTS = f"{WORKSPACE}:C0INCIDENT"
THREAD_ID = f"{INCIDENTS}:{ROOT_TS}"


def test_counts_per_kind_and_state(projected: Projected) -> None:
    assert projected.result["documents"] == {
        "message": {"active": 11, "tombstoned": 4},
        "thread_context": {"active": 2, "tombstoned": 0},
    }
    assert projected.result["total"] == 17


def test_canonical_store_is_never_written(projected: Projected) -> None:
    after = file_sha256(projected.settings.canonical_path)
    assert after == projected.canonical_sha256_before


def test_non_content_subtypes_are_not_documents(projected: Projected) -> None:
    docs = documents(projected.settings)
    assert f"{GENERAL}:1700000003.000400" not in docs  # channel_join
    assert {json.loads(d["metadata_json"]).get("subtype") for d in docs.values()} >= {
        "bot_message",
        "thread_broadcast",
        "tombstone",
    }


def test_mentions_links_and_raw_ids(projected: Projected) -> None:
    doc = documents(projected.settings)[f"{GENERAL}:1700000000.000100"]
    assert doc["text_display"] == (
        "Hi @Annie and @Bob Stone, also @U0NOBODY: see #incidents and #general @here @eng-team"
        " (not #G0SECRET)"  # a private channel's name is its members' to see
    )
    for raw_id in ("U024BE7LH", "U0BOB", "C0INCIDENT", "S0ENG", "G0SECRET"):
        assert raw_id in doc["text_lexical"].split()
    assert doc["author_name"] == "Bob Stone"  # blank display name -> real name
    assert doc["text_embedding"] == "#general Bob Stone: " + doc["text_display"]
    assert doc["text_hash"] == hashlib.sha256(doc["text_embedding"].encode()).hexdigest()
    reactions = json.loads(doc["metadata_json"])["reactions"]
    assert reactions == [{"name": "thumbsup", "count": 2, "users": ["U0CY", "U0ZOE"]}]


def test_formatting_code_dates_and_accents(projected: Projected) -> None:
    docs = documents(projected.settings)
    deploy = docs[f"{GENERAL}:1700000001.000200"]["text_display"]
    assert deploy.startswith("Deploy v2.3.1 is done maybe & the CI run ")
    assert "(https://ci.example.com/run?id=7&x=1)" in deploy
    assert ":white_check_mark: :thumbsup::skin-tone-2:" in deploy
    code = docs[f"{GENERAL}:1700000002.000300"]["text_display"]
    assert "`SELECT *bold* FROM t`" in code
    assert "```\nif a < b && c:\n    x_y_z = *keep*\n```" in code
    # A NUL ended DuckDB's full-text tokenizer: the words after it were never indexed.
    assert code.endswith("due Feb 18, 2014 café naïve Привет")
    assert "\x00" not in docs[f"{GENERAL}:1700000002.000300"]["text_lexical"]


def test_conversation_types_and_author_names(projected: Projected) -> None:
    docs = documents(projected.settings)
    by_channel = {d["channel_id"]: d["conversation_type"] for d in docs.values()}
    assert by_channel == {
        "C0GENERAL": "public",
        "C0INCIDENT": "public",
        "G0SECRET": "private",
        "D0ANNBOB": "dm",
        "C0MPIM": "group_dm",
    }
    assert docs[f"{WORKSPACE}:G0SECRET:1700000400.000100"]["author_name"] == "Zoë"
    assert docs[f"{WORKSPACE}:C0MPIM:1700000600.000100"]["author_name"] == "cy"  # handle only
    bot = docs[f"{GENERAL}:1700000006.000700"]
    assert (bot["is_bot"], bot["is_active"], bot["author_id"]) == (True, True, "B0DEPLOY")


def test_permalinks(projected: Projected) -> None:
    docs = documents(projected.settings)
    root = docs[THREAD_ID]
    assert root["permalink"] == "https://acme.slack.com/archives/C0INCIDENT/p1700000100000100"
    reply = docs[f"{INCIDENTS}:1700000160.000200"]
    assert reply["permalink"] == (
        "https://acme.slack.com/archives/C0INCIDENT/p1700000160000200"
        f"?thread_ts={ROOT_TS}&cid=C0INCIDENT"
    )
    assert docs[f"thread:{THREAD_ID}"]["permalink"] == root["permalink"]


def test_tombstones_stay_inactive(projected: Projected) -> None:
    docs = documents(projected.settings)
    inactive = {doc_id for doc_id, doc in docs.items() if not doc["is_active"]}
    assert inactive == {
        f"{GENERAL}:1700000004.000500",  # deleted
        f"{GENERAL}:1700000005.000600",  # blank
        f"{INCIDENTS}:1700000230.000400",  # deleted reply
        f"{INCIDENTS}:1700000300.000100",  # deleted root (subtype tombstone)
    }


def test_threads_and_thread_context(projected: Projected) -> None:
    docs = documents(projected.settings)
    reply = docs[f"{INCIDENTS}:1700000160.000200"]
    assert (reply["thread_id"], reply["thread_root_id"]) == (THREAD_ID, THREAD_ID)
    assert reply["is_thread_reply"] and not reply["is_thread_parent"]
    assert docs[f"{GENERAL}:1700000000.000100"]["thread_id"] is None
    context = docs[f"thread:{THREAD_ID}"]
    assert context["document_kind"] == "thread_context"
    broadcast = f"{INCIDENTS}:1700000220.000300"
    assert docs[broadcast]["is_thread_broadcast"]  # a message document ...
    assert context["message_ids"] == [THREAD_ID, f"{INCIDENTS}:1700000160.000200", broadcast]
    assert context["text_display"] == (
        "[2023-11-14T22:15:00Z] Bob Stone: db down: error 28P01 for @Annie\n\n"
        "[2023-11-14T22:16:00Z] Annie: rotating the password now\n\n"
        "[2023-11-14T22:17:00Z] Zoë: fixed, see runbook (https://wiki.example.com/pg)"
    )  # ... and in its thread context; the deleted reply is not
    assert context["text_hash"] == hashlib.sha256(context["text_display"].encode()).hexdigest()
    assert (context["author_name"], context["ts"]) == ("Bob Stone", ROOT_TS)
    assert "files" not in json.loads(docs[THREAD_ID]["metadata_json"])
    files = json.loads(docs[THREAD_ID]["files"])
    assert files == [  # the file deleted in Slack, F0OLD, is not listed
        {"file_id": "F0LOG", "name": "pg.log", "title": "Postgres log", "mimetype": "text/plain"}
    ]


def test_thread_with_deleted_root_keeps_its_replies(projected: Projected) -> None:
    docs = documents(projected.settings)
    orphan_thread = f"{INCIDENTS}:1700000300.000100"
    context = docs[f"thread:{orphan_thread}"]
    assert context["message_ids"] == [f"{INCIDENTS}:1700000360.000200"]
    assert context["thread_root_id"] == orphan_thread
    assert docs[f"{INCIDENTS}:1700000360.000200"]["thread_root_id"] == orphan_thread
