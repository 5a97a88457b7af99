"""Who may see a conversation after `sync` loses access to it: private ones fail closed."""

from pathlib import Path

import pytest

from slackquery.canonical.importer import import_source
from slackquery.errors import SlackqueryError
from slackquery.settings import get_settings
from slackquery.slack.sync import SyncRequest, sync
from tests.canonical.conftest import query
from tests.slack.conftest import Live
from tests.slack.server import Fault

LEADERSHIP = "G0SQLDR01"  # the sample's private channel
GROUP_DM = "G0SQMP001"
DM = "D0SQDM001"
OPS_LEGACY = "C0SQOLD09"  # a public channel
NOT_PUBLIC = SyncRequest(types=("private", "mpim", "im"))


def stored_members(db: Path, channel_id: str) -> list[str] | None:
    return query(db, "select member_ids from channels where channel_id = ?", [channel_id])[0][0]


def warned(report: dict, channel_id: str, words: str) -> bool:
    return any(
        channel_id in item["problem"] and words in item["problem"] for item in report["warnings"]
    )


@pytest.mark.parametrize("channel_id", [LEADERSHIP, GROUP_DM, DM])
def test_a_private_conversation_no_longer_listed_is_closed_until_it_is_read_again(
    live: Live, channel_id: str
) -> None:
    db = live.settings.canonical_path
    sync(live.settings, NOT_PUBLIC, clock=live.clock)
    members = stored_members(db, channel_id)
    assert members
    conversation = live.slack.conversations.pop(channel_id)

    other_types = sync(live.settings, SyncRequest(types=("public",)), clock=live.clock)
    assert other_types["revoked"] == [] and stored_members(db, channel_id) == members

    closed = sync(live.settings, NOT_PUBLIC, clock=live.clock)
    assert stored_members(db, channel_id) == []
    assert closed["revoked"] == [{"channel_id": channel_id, "reason": "no longer listed"}]
    assert closed["counts"]["channels"]["updated"] == 1
    assert warned(closed, channel_id, "member list is emptied")
    again = sync(live.settings, NOT_PUBLIC, clock=live.clock)  # reported once, when closed
    assert again["revoked"] == [] and not warned(again, channel_id, "member list is emptied")
    assert again["counts"]["channels"]["updated"] == 0
    assert query(db, "select latest_run_id from channels where channel_id = ?", [channel_id]) == [
        (closed["run_id"],)
    ]

    live.slack.conversations[channel_id] = conversation
    reopened = sync(live.settings, NOT_PUBLIC, clock=live.clock)
    assert reopened["revoked"] == [] and stored_members(db, channel_id) == members


@pytest.mark.parametrize(
    ("channel_id", "fault"),
    [
        (LEADERSHIP, Fault("conversations.members", "channel_not_found", channel=LEADERSHIP)),
        (DM, Fault("conversations.history", "not_in_channel", channel=DM)),
        # The group DM's thread is active in the re-read window: the run reads it first.
        (GROUP_DM, Fault("conversations.replies", "not_in_channel", channel=GROUP_DM)),
    ],
    ids=["members", "history", "replies"],
)
def test_a_private_conversation_unreadable_at_any_step_is_closed(
    live: Live, channel_id: str, fault: Fault
) -> None:
    db = live.settings.canonical_path
    sync(live.settings, NOT_PUBLIC, clock=live.clock)
    assert stored_members(db, channel_id)
    live.slack.faults.append(fault)
    report = sync(live.settings, NOT_PUBLIC, clock=live.clock)
    assert report["skipped"] == [{"channel_id": channel_id, "error": fault.kind}]
    assert report["revoked"] == [{"channel_id": channel_id, "reason": fault.kind}]
    assert stored_members(db, channel_id) == []
    assert warned(report, channel_id, "member list is emptied")


def test_channels_names_a_conversation_no_longer_listed_that_sync_read_before(
    live: Live,
) -> None:
    db = live.settings.canonical_path
    named = SyncRequest(channels=("leadership", "ops-legacy"))
    sync(live.settings, named, clock=live.clock)
    public_members = stored_members(db, OPS_LEGACY)
    del live.slack.conversations[LEADERSHIP], live.slack.conversations[OPS_LEGACY]
    report = sync(live.settings, named, clock=live.clock)
    assert report["revoked"] == [
        {"channel_id": OPS_LEGACY, "reason": "no longer listed"},
        {"channel_id": LEADERSHIP, "reason": "no longer listed"},
    ]
    assert stored_members(db, LEADERSHIP) == []
    # A public channel gone from the list is deleted, or private without the token: closed.
    assert public_members and stored_members(db, OPS_LEGACY) == []
    kind = query(db, "select conversation_type from channels where channel_id = ?", [OPS_LEGACY])
    assert kind == [("private_channel",)]
    assert warned(report, OPS_LEGACY, "stored as private")
    with pytest.raises(SlackqueryError, match=r"no such conversation.*: never-synced$"):
        sync(live.settings, SyncRequest(channels=("leadership", "never-synced")), clock=live.clock)


def test_a_conversation_known_only_from_an_import_keeps_the_members_of_its_export(
    live: Live, sample_zip: Path
) -> None:
    db = live.settings.canonical_path
    import_source(live.settings, sample_zip)
    members = stored_members(db, LEADERSHIP)
    del live.slack.conversations[LEADERSHIP]
    report = sync(live.settings, NOT_PUBLIC, clock=live.clock)
    assert report["revoked"] == [] and stored_members(db, LEADERSHIP) == members


def test_a_later_run_reads_private_member_lists_always_and_public_ones_in_turn(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync(live.settings, clock=live.clock)
    conversations = live.slack.conversations
    public = sorted(cid for cid, c in conversations.items() if c.get("is_channel"))
    direct = {cid for cid, c in conversations.items() if c.get("is_im") or c.get("is_mpim")}
    assert {GROUP_DM, DM} <= direct <= set(
        live.slack.requested("conversations.members", "channel")
    ) and len(public) > 4
    # Two requests a minute for every method: a run reads two public member lists.
    monkeypatch.setenv("SLACKQUERY_SLACK_REQUESTS_PER_MINUTE", "2")
    settings = get_settings()
    for turn in range(2):
        before = len(live.slack.log)
        sync(settings, clock=live.clock)
        # A private channel's members decide who sees it: read every run. DMs and group DMs
        # keep theirs for good: never read again.
        assert set(live.slack.requested("conversations.members", "channel", before)) == {
            LEADERSHIP,
            *public[2 * turn : 2 * turn + 2],
        }


@pytest.mark.parametrize("first_public", [False, True])
def test_a_conversation_listed_twice_is_kept_once_and_private_when_they_disagree(
    live: Live, monkeypatch: pytest.MonkeyPatch, first_public: bool
) -> None:
    # The two entries were merged in either order as public; a new conversation listed
    # twice failed the run on a duplicate key.
    listed = live.slack._conversations_list
    private = live.slack.conversations[LEADERSHIP]
    public = {**private, "is_private": False, "is_group": False, "is_channel": True}
    twins = [public, private] if first_public else [private, public]
    new = {**live.slack.conversations[OPS_LEGACY], "id": "C0SQNEW01", "name": "new"}

    def twice(params: dict[str, str]) -> dict:
        page = listed(params)
        if "cursor" not in params:
            page["channels"] = [c for c in page["channels"] if c["id"] != LEADERSHIP]
            page["channels"] += [*twins, new]
        return page

    live.slack.conversations["C0SQNEW01"] = new
    live.slack.messages["C0SQNEW01"], live.slack.members["C0SQNEW01"] = {}, ["U0SQ00001"]
    monkeypatch.setattr(live.slack, "_conversations_list", twice)
    report = sync(live.settings, clock=live.clock)
    db = live.settings.canonical_path
    kinds = dict(query(db, "select channel_id, conversation_type from channels"))
    assert kinds[LEADERSHIP] == "private_channel" and kinds["C0SQNEW01"] == "public_channel"
    assert warned(report, LEADERSHIP, "listed twice: the first kept, as private")
    assert report["conversations"] == len(live.slack.conversations)


def test_a_team_domain_that_is_no_slack_domain_is_not_the_workspace_address(
    live: Live,
) -> None:
    # It became every permalink's host (`https://../../etc.slack.com/...`).
    live.slack.team_domain = "../../etc"
    report = sync(live.settings, SyncRequest(channels=(OPS_LEGACY,)), clock=live.clock)
    (slug,) = query(live.settings.canonical_path, "select workspace_slug from workspaces")[0]
    assert slug == live.slack.team_id.lower()
    assert any("is no Slack domain" in item["problem"] for item in report["warnings"])
