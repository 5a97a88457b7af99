"""The importer end to end: formats, columns, idempotence, incremental updates, tombstones."""

import datetime as dt
import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from slackquery.canonical import importer
from slackquery.canonical.importer import import_source, slug_from_path
from slackquery.cli import main
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.canonical.conftest import TEAM, default_members, msg, query, snapshot, write_export
from tests.crashing import held_open

BEACON = Path("/work/shared/benchmarks/beacon/corpus.jsonl")
BEACON_LINES = [
    {
        "local_id": "1",
        "channel": "eng",
        "author": "meera",
        "created_at": "2026-08-24T09:00:00+05:30",
        "parent_id": None,
        "text": "root",
    },
    {
        "local_id": "2",
        "channel": "eng",
        "author": "priya",
        "created_at": "2026-08-24T09:00:00+05:30",
        "parent_id": "1",
        "text": "same second reply",
    },
    {
        "local_id": "3",
        "channel": "eng",
        "author": "meera",
        "created_at": "2026-08-24T09:05:00+05:30",
        "parent_id": "2",
        "text": "reply to a reply",
    },
    {
        "local_id": "1",
        "channel": "ops",
        "author": "priya",
        "created_at": "2026-08-25T10:00:00+05:30",
        "parent_id": None,
        "text": "ops root",
    },
]


def write_beacon(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_export_import_fills_every_table(settings: Settings, export_zip: Path) -> None:
    report = import_source(settings, export_zip)
    assert report["workspace"] == {
        "workspace_id": "T0TEST",
        "workspace_slug": "acme",
        "workspace_name": "Acme",
        "workspace_url": "https://acme.slack.com",
        "slug_source": "the file name",
        "renamed": False,
    }
    assert report["counts"]["messages"] == {
        "inserted": 10,
        "updated": 0,
        "unchanged": 0,
        "tombstoned": 0,
    }
    assert report["counts"]["channels"]["inserted"] == 5
    assert report["warning_count"] == 0
    db = settings.canonical_path
    assert query(db, "select max(schema_version) from schema_metadata") == [(2,)]
    rows = dict(
        (row[0], row[1:])
        for row in query(
            db,
            "select message_key, ts_us, is_thread_parent, is_thread_reply, is_thread_broadcast, "
            "is_edited, is_bot, user_id, file_ids, reactions::varchar, search_text "
            "from messages",
        )
    )
    parent = rows["T0TEST:C01:1704200000.000100"]
    assert parent[:6] == (1704200000000100, True, False, False, False, False)
    assert json.loads(parent[8]) == [{"name": "eyes", "count": 1, "users": ["U02"]}]
    assert rows["T0TEST:C01:1704200060.000200"][1:3] == (False, True)
    broadcast = rows["T0TEST:C01:1704200120.000300"]
    assert broadcast[1:5] == (False, True, True, True)
    bot = rows["T0TEST:C01:1704290000.000001"]
    assert bot[5:7] == (True, "B01")
    assert bot[9] == "build 17 green\nBuild 17\nall tests passed"
    assert rows["T0TEST:C01:1704290100.000002"][7] == ["F01"]
    channels = dict(query(db, "select channel_id, conversation_type || '/' || name from channels"))
    assert channels == {
        "C01": "public_channel/general",
        "C02": "public_channel/eng",
        "G01": "private_channel/secret",
        "D01": "im/alice, bob",
        "G02": "mpim/alice, bob, chloé",
    }
    assert query(db, "select member_ids from channels where channel_id = 'G02'") == [
        (["U01", "U02", "U03"],)
    ]
    assert query(db, "select username, is_bot from users where user_id = 'B01'") == [
        ("ci-bot", True)
    ]
    assert query(db, "select file_id, message_key, local_object_path from files") == [
        ("F01", "T0TEST:C01:1704290100.000002", None)
    ]
    runs = query(db, "select run_id, status, counts_json->>'$.messages.inserted' from import_runs")
    assert runs == [(report["run_id"], "succeeded", "10")]


@pytest.mark.usefixtures("open_umask")
def test_a_new_home_is_private_to_its_account(settings: Settings, export_zip: Path) -> None:
    """Every DM and private channel lands there: other local accounts must not read it."""
    import_source(settings, export_zip)

    assert stat.S_IMODE(settings.home.stat().st_mode) == 0o700


def test_folder_and_zip_give_the_same_rows(settings: Settings, tmp_path: Path) -> None:
    folder = write_export(tmp_path / "acme", default_members(), as_zip=False)
    import_source(settings, folder)
    assert query(settings.canonical_path, "select count(*) from messages") == [(10,)]
    report = import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    assert report["changed"] is False


def test_reimport_changes_nothing(settings: Settings, export_zip: Path) -> None:
    import_source(settings, export_zip)
    before = snapshot(settings.canonical_path)
    report = import_source(settings, export_zip)
    assert report["changed"] is False
    assert report["counts"]["messages"] == {
        "inserted": 0,
        "updated": 0,
        "unchanged": 10,
        "tombstoned": 0,
    }
    after = snapshot(settings.canonical_path)
    assert before is not None and after is not None
    assert len(before.pop("import_runs")) == 1
    assert len(after.pop("import_runs")) == 2
    assert after == before
    assert query(settings.canonical_path, "select count(*) from import_runs") == [(2,)]


def test_newer_export_updates_adds_and_tombstones(settings: Settings, tmp_path: Path) -> None:
    first = import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    members = default_members()
    day = members["general/2024-01-02.json"]
    day[1]["text"] = "looking at it now"  # edited
    del day[2]  # vanished from a covered day
    members["general/2024-01-05.json"] = [msg("1704456000.000001", "new day")]
    del members["eng/2024-01-04.json"]  # whole day gone, still inside the export's span
    members["eng/2024-01-05.json"] = [msg("1704456000.000002", "eng later")]
    second = import_source(settings, write_export(tmp_path / "acme-2.zip", members))
    assert second["counts"]["messages"] == {
        "inserted": 2,
        "updated": 1,
        "unchanged": 7,
        "tombstoned": 2,
    }
    db = settings.canonical_path
    rows = dict(
        (row[0], row[1:])
        for row in query(
            db, "select message_key, is_deleted, latest_run_id, first_seen_run_id from messages"
        )
    )
    assert rows["T0TEST:C01:1704200120.000300"] == (True, second["run_id"], first["run_id"])
    assert rows["T0TEST:C02:1704380000.000001"][0] is True
    assert rows["T0TEST:C01:1704200060.000200"] == (False, second["run_id"], first["run_id"])
    assert rows["T0TEST:C01:1704290000.000001"] == (False, first["run_id"], first["run_id"])
    assert query(db, "select text from messages where ts = '1704200060.000200'") == [
        ("looking at it now",)
    ]
    assert query(db, "select workspace_slug, latest_run_id from workspaces") == [
        ("acme", second["run_id"])
    ]
    # The first export again. Nothing in it postdates the second run, so it may be older
    # than the deletions, which stand. The text change carries no `edited` mark, so nothing
    # says which copy is newer: the last input wins (test_input_order has marked edits).
    third = import_source(settings, write_export(tmp_path / "acme.zip", default_members()))
    assert third["counts"]["messages"]["updated"] == 1
    assert query(db, "select count(*) from messages where is_deleted") == [(2,)]
    # 2024-01-05 lies outside the first export's span, so its message is not tombstoned.
    assert third["counts"]["messages"]["tombstoned"] == 0


def test_slackdump_layouts_record_local_paths(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["__uploads/F01/notes.txt"] = b"hello"
    members["general/2024-01-03.json"].append(
        msg("1704290400.000004", "pic", files=[{"id": "F02", "name": "a.png"}])
    )
    members["general/attachments/F02-a.png"] = b"\x89PNG"
    report = import_source(settings, write_export(tmp_path / "dump.zip", members))
    assert report["source_format"] == "slackdump_export"
    assert query(
        settings.canonical_path, "select file_id, local_object_path from files order by 1"
    ) == [("F01", "__uploads/F01/notes.txt"), ("F02", "general/attachments/F02-a.png")]


def test_beacon_keeps_source_ids_and_builds_threads(settings: Settings, tmp_path: Path) -> None:
    path = write_beacon(tmp_path / "corpus.jsonl", BEACON_LINES)
    report = import_source(settings, path, workspace_slug="beacon")
    assert report["source_format"] == "beacon_jsonl"
    assert report["workspace"]["workspace_id"] == "beacon"
    rows = query(
        settings.canonical_path,
        "select source_message_id, ts, thread_ts, is_thread_parent, is_thread_reply, "
        "reply_count from messages order by source_message_id",
    )
    by_id = {row[0]: row[1:] for row in rows}
    root_ts = by_id["synthetic:eng:1"][0]
    assert root_ts == "1787542200.000000"
    assert by_id["synthetic:eng:1"][1:] == (root_ts, True, False, 2)
    assert by_id["synthetic:eng:2"] == ("1787542200.000001", root_ts, False, True, None)
    assert by_id["synthetic:eng:3"][1:3] == (root_ts, False)
    assert by_id["synthetic:ops:1"][1:] == (None, False, False, None)
    assert import_source(settings, path, workspace_slug="beacon")["changed"] is False


@pytest.mark.skipif(not BEACON.exists(), reason="shared Beacon corpus not present")
def test_beacon_corpus_and_an_export_share_one_store(settings: Settings, export_zip: Path) -> None:
    import_source(settings, export_zip)
    report = import_source(settings, BEACON, source_format="beacon-jsonl", workspace_slug="beacon")
    assert report["counts"]["messages"]["inserted"] == 2233
    db = settings.canonical_path
    assert query(db, "select count(*) from workspaces") == [(2,)]
    assert query(
        db,
        "select count(*) filter (where is_thread_parent), count(*) filter (where is_thread_reply),"
        " count(distinct source_message_id) from messages where workspace_id = 'beacon'",
    ) == [(158, 460, 2233)]


def test_a_slug_another_workspace_has_is_warned_about(
    settings: Settings, export_zip: Path, tmp_path: Path
) -> None:
    # Both workspaces' permalinks pointed to https://acme.slack.com, without a word.
    import_source(settings, export_zip)
    other = json.loads(json.dumps(default_members()).replace(TEAM, "T0OTHER"))
    export = write_export(tmp_path / "other.zip", other)
    report = import_source(settings, export, workspace_slug="acme")
    assert [item["problem"] for item in report["warnings"]] == [
        "workspace slug 'acme' is also that of T0TEST: the permalinks of both point to "
        "https://acme.slack.com; give one of them its own with --workspace-slug"
    ]


def test_slug_from_path() -> None:
    assert slug_from_path(Path("Acme Corp Slack export Jan 1 2024 - Feb 1 2024.zip")) == "acme-corp"
    assert slug_from_path(Path("corpus.jsonl")) == "corpus"
    assert slug_from_path(Path("___.zip")) == "workspace"


def test_cli_prints_json_report(
    home: Path, export_zip: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["import", str(export_zip), "--json", "--workspace-name", "Acme Inc"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["workspace"]["workspace_name"] == "Acme Inc"
    assert report["counts"]["messages"]["inserted"] == 10
    assert main(["import", str(export_zip)]) == 0
    assert "no changes (already imported)" in capsys.readouterr().out


def test_a_stop_during_the_commit_waits_for_it_and_says_the_import_is_in(
    home: Path, export_zip: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # DuckDB ended the commit in "RuntimeError: Query interrupted" with a traceback and exit
    # status 1, with the import committed whole: the command said it failed.
    commit = importer._commit

    def stopped_while_committing(connection: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # a service manager's stop, as the commit starts
        commit(connection)

    monkeypatch.setattr(importer, "_commit", stopped_while_committing)
    assert main(["import", str(export_zip)]) == 128 + signal.SIGTERM
    error = capsys.readouterr().err
    assert re.fullmatch(r"error: terminated; import run \S+ had committed whole\n", error)
    monkeypatch.setattr(importer, "_commit", commit)
    assert main(["import", str(export_zip)]) == 0
    assert "no changes (already imported)" in capsys.readouterr().out


def test_the_report_says_where_the_slug_came_from_and_when_it_changed(
    home: Path, export_zip: Path, capsys: pytest.CaptureFixture
) -> None:
    # `import s.zip` made every permalink https://s.slack.com/… without a word, and a second
    # import that set the real slug said "no changes (already imported)".
    assert main(["import", str(export_zip)]) == 0
    said = capsys.readouterr().out
    slug = slug_from_path(export_zip)
    assert f"slug {slug!r} is the file name's: permalinks point to https://{slug}." in said
    assert main(["import", str(export_zip), "--workspace-slug", "acme-inc"]) == 0
    said = capsys.readouterr().out
    assert "workspace now acme-inc (" in said and "no changes" not in said
    assert "file name's" not in said
    assert main(["import", str(export_zip), "--json"]) == 0
    workspace = json.loads(capsys.readouterr().out)["workspace"]
    assert (workspace["slug_source"], workspace["renamed"]) == ("an earlier import", False)


def test_report_summarises_the_whole_store(settings: Settings, export_zip: Path) -> None:
    held = import_source(settings, export_zip)["store"]
    (messages, threads, first_us, last_us) = query(
        settings.canonical_path,
        "select count(*) filter (where not is_deleted), "
        "count(*) filter (where not is_deleted and is_thread_parent), min(ts_us), max(ts_us) "
        "from messages",
    )[0]
    assert held["workspaces"] == 1 and held["messages"] == messages > 0
    assert held["threads"] == threads > 0
    assert held["users"] == query(settings.canonical_path, "select count(*) from users")[0][0]
    assert held["channels"] == query(settings.canonical_path, "select count(*) from channels")[0][0]
    assert (held["first_date"], held["last_date"]) == (_utc_date(first_us), _utc_date(last_us))


def _utc_date(ts_us: int) -> str:
    return dt.datetime.fromtimestamp(ts_us / 1_000_000, dt.UTC).date().isoformat()


def _without_team_ids() -> dict:
    members = default_members()
    members["users.json"] = [
        {key: value for key, value in user.items() if key != "team_id"}
        | {"profile": {k: v for k, v in user["profile"].items() if k != "team"}}
        for user in members["users.json"]
    ]
    return members


def test_renamed_export_without_team_id_is_refused(settings: Settings, tmp_path: Path) -> None:
    first = import_source(settings, write_export(tmp_path / "v1.zip", _without_team_ids()))
    assert first["workspace"]["workspace_id"] == "v1"
    before = snapshot(settings.canonical_path)
    renamed = write_export(tmp_path / "v2.zip", _without_team_ids())
    with pytest.raises(SlackqueryError, match=r"--workspace-slug v1") as refusal:
        import_source(settings, renamed)
    assert "v2.zip" in str(refusal.value) and "'v2'" in str(refusal.value)
    assert snapshot(settings.canonical_path) == before
    again = import_source(settings, renamed, workspace_slug="v1")
    assert again["changed"] is False
    assert query(settings.canonical_path, "select count(*) from messages") == [(10,)]


def test_exports_named_by_slack_still_match_without_team_id(
    settings: Settings, tmp_path: Path
) -> None:
    members = _without_team_ids()
    import_source(settings, write_export(tmp_path / "Acme Slack export Jan 2.zip", members))
    members["general/2024-01-05.json"] = [msg("1704456000.000001", "new day")]
    report = import_source(
        settings, write_export(tmp_path / "Acme Slack export Jan 5.zip", members)
    )
    assert report["workspace"]["workspace_id"] == "acme"
    assert report["counts"]["messages"]["inserted"] == 1
    assert query(settings.canonical_path, "select count(*) from workspaces") == [(1,)]


def test_renamed_beacon_corpus_is_refused(settings: Settings, tmp_path: Path) -> None:
    import_source(settings, write_beacon(tmp_path / "corpus.jsonl", BEACON_LINES))
    before = snapshot(settings.canonical_path)
    with pytest.raises(
        SlackqueryError,
        match=r"copy\.jsonl: .* 4 of its messages \(e\.g\. synthetic:eng:1\) belong to workspace "
        r"'corpus' .*; pass --workspace-slug corpus to update that workspace",
    ):
        import_source(settings, write_beacon(tmp_path / "copy.jsonl", BEACON_LINES))
    assert snapshot(settings.canonical_path) == before
    # Channel ids are hashes of names: another chat with the same channels is no copy.
    other = [{**line, "text": f"other {line['text']}"} for line in BEACON_LINES]
    report = import_source(settings, write_beacon(tmp_path / "other.jsonl", other))
    assert report["workspace"]["workspace_id"] == "other"
    assert query(settings.canonical_path, "select count(*) from workspaces") == [(2,)]


@pytest.mark.parametrize("users", ["stripped", "empty"])
def test_an_export_that_lost_its_team_ids_updates_the_stored_workspace(
    settings: Settings, tmp_path: Path, users: str
) -> None:
    import_source(settings, write_export(tmp_path / "Acme Slack export.zip", default_members()))
    members = _without_team_ids()
    if users == "empty":
        members["users.json"] = []
    teamless = write_export(tmp_path / "teamless.zip", members)
    with pytest.raises(SlackqueryError) as refusal:
        import_source(settings, teamless)
    assert str(refusal.value).endswith(
        "belong to workspace 'T0TEST' (slug 'acme') already in the store; pass "
        "--workspace-slug acme to update that workspace, or --workspace-slug teamless to "
        "import it as a separate one"
    )
    report = import_source(settings, teamless, workspace_slug="acme")  # the advice works
    assert report["workspace"]["workspace_id"] == "T0TEST"
    assert report["counts"]["messages"]["unchanged"] == 10
    assert query(
        settings.canonical_path, "select workspace_id, workspace_slug from workspaces"
    ) == [("T0TEST", "acme")]


def test_a_canonical_store_another_process_holds_is_one_clear_line(
    settings: Settings, export_zip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # DuckDB's own text ("Conflicting lock is held in .../python3.11 ... you would be able
    # to open this database in read-only mode, e.g. by using the -readonly parameter in the
    # CLI") named no command and gave advice that does not apply.
    import_source(settings, export_zip)
    path = settings.canonical_path
    errors = set()
    with held_open(path) as holder:
        for command in (["import", str(export_zip)], ["project"]):
            assert main(command) == 1
            errors.add(capsys.readouterr().err)
    assert errors == {
        f"error: canonical store {path} is busy: another process (PID {holder}) has it "
        "open; retry when it is done\n"
    }
