"""Bad input: one clear error naming the file (or a counted warning), store untouched."""

import codecs
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from slackquery.canonical import store
from slackquery.canonical.importer import import_source
from slackquery.errors import SlackqueryError
from slackquery.settings import Settings
from tests.canonical.conftest import default_members, msg, query, snapshot, write_export


def _problems(report: dict[str, Any]) -> list[str]:
    return [item["problem"] for item in report["warnings"]]


def _without(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda members: members.pop(name)


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda members: members.__setitem__(name, value)


ERROR_CASES = {
    # A corrupt *later* day file: earlier days were already staged when it fails.
    "malformed json": (_set("secret/2024-01-02.json", b'[{"ts": '), "malformed JSON"),
    "missing users.json": (_without("users.json"), "missing users.json"),
    "day file not a list": (_set("eng/2024-01-04.json", {"ts": "1.0"}), "must be a JSON list"),
    "invalid utf-8": (_set("eng/2024-01-04.json", b'[{"text": "\xff\xfe"}]'), "invalid UTF-8"),
    "users.json not a list": (_set("users.json", {"id": "U1"}), "expected a JSON list"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_bad_export_fails_and_leaves_store_untouched(
    settings: Settings, tmp_path: Path, case: str
) -> None:
    import_source(settings, write_export(tmp_path / "good.zip", default_members()))
    before = snapshot(settings.canonical_path)
    members = default_members()
    members["general/2024-01-09.json"] = [msg("1704800000.000001", "would be new")]
    mutate, problem = ERROR_CASES[case]
    mutate(members)
    with pytest.raises(SlackqueryError, match=problem) as failure:
        import_source(settings, write_export(tmp_path / "bad.zip", members))
    assert "bad.zip" in str(failure.value)
    assert "\n" not in str(failure.value)
    assert snapshot(settings.canonical_path) == before


@pytest.mark.parametrize("as_zip", [True, False])
def test_a_file_over_the_size_limit_is_refused_before_it_is_read(
    settings: Settings, tmp_path: Path, as_zip: bool
) -> None:
    # A 1 MB ZIP entry of spaces expanded to 800 MB and the import held 1.8 GB: a few more
    # megabytes of ZIP and memory ran out, with no error to say why.
    import_source(settings, write_export(tmp_path / "good.zip", default_members()))
    before = snapshot(settings.canonical_path)
    members = default_members()
    members["eng/2024-01-04.json"] = b"[" + b" " * 5000 + b"]"
    capped = settings.model_copy(update={"import_max_file_bytes": 4096})
    export = write_export(tmp_path / ("big.zip" if as_zip else "big"), members, as_zip=as_zip)
    pattern = r"eng/2024-01-04\.json: 5,002 bytes, over the 4,096 .*IMPORT_MAX_FILE_BYTES"
    with pytest.raises(SlackqueryError, match=pattern):
        import_source(capped, export)
    assert snapshot(settings.canonical_path) == before


@pytest.mark.parametrize("slug", ["Acme", "-acme", "acme-", "a" * 64, "acme.corp"])
def test_a_slug_that_is_no_dns_label_is_refused(
    settings: Settings, tmp_path: Path, slug: str
) -> None:
    # Every permalink is https://<slug>.slack.com/…: a 300-character slug was taken.
    export = write_export(tmp_path / "good.zip", default_members())
    with pytest.raises(SlackqueryError, match="at most 63, neither first nor last a dash"):
        import_source(settings, export, workspace_slug=slug)
    assert not settings.canonical_path.exists()


def test_failed_first_import_leaves_no_store(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["secret/2024-01-02.json"] = b"not json"
    with pytest.raises(SlackqueryError, match=r"secret/2024-01-02\.json: malformed JSON"):
        import_source(settings, write_export(tmp_path / "bad.zip", members))
    assert not settings.canonical_path.exists()


@pytest.mark.parametrize("entry", ["../evil.json", "/etc/evil.json", "general/../../x.json"])
def test_zip_with_escaping_paths_is_refused(settings: Settings, tmp_path: Path, entry: str) -> None:
    path = write_export(tmp_path / "evil.zip", default_members())
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(zipfile.ZipInfo(entry), b"[]")
    with pytest.raises(SlackqueryError, match="refusing ZIP entry"):
        import_source(settings, path)
    assert not settings.canonical_path.exists()


def test_not_a_zip(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "export.zip"
    path.write_bytes(b"this is not a zip")
    with pytest.raises(SlackqueryError, match=r"export\.zip: not a ZIP file"):
        import_source(settings, path)
    assert not settings.canonical_path.exists()


def test_empty_export(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "empty.zip"
    zipfile.ZipFile(path, "w").close()
    with pytest.raises(SlackqueryError, match=r"empty\.zip: the export is empty"):
        import_source(settings, path)
    only_lists = {"users.json": [], "channels.json": []}
    with pytest.raises(SlackqueryError, match="has no messages"):
        import_source(settings, write_export(tmp_path / "lists.zip", only_lists))
    assert not settings.canonical_path.exists()


def test_unknown_user_and_channel_are_counted_warnings(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["general/2024-01-02.json"].append(msg("1704200700.000001", "who am I", user="U999"))
    members["general/2024-01-02.json"].append(msg("1704200800.000001", "me again", user="U999"))
    members["ghost/2024-01-02.json"] = [msg("1704200900.000001", "unlisted")]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    problems = [item["problem"] for item in report["warnings"]]
    assert report["warning_count"] == 2
    assert any("unknown user U999" in problem and "2 message(s)" in problem for problem in problems)
    assert any("unknown conversation 'ghost'" in problem for problem in problems)
    assert report["counts"]["messages"]["inserted"] == 12


def test_oversized_message_is_skipped_with_warning(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["general/2024-01-02.json"].append(msg("1704200700.000001", "x" * 10_000_000))
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["messages_skipped"] == 1
    assert report["counts"]["messages"]["inserted"] == 10
    assert "max_message_bytes" in report["warnings"][0]["problem"]
    assert "general/2024-01-02.json" in report["warnings"][0]["file"]


def test_bad_beacon_line_names_the_line(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text('{"local_id": "1", "channel": "eng"}\n', encoding="utf-8")
    with pytest.raises(SlackqueryError, match=r"chat\.jsonl:1: missing or invalid field 'author'"):
        import_source(settings, path)
    path.write_text("{oops\n", encoding="utf-8")
    with pytest.raises(SlackqueryError, match=r"chat\.jsonl:1: malformed JSON"):
        import_source(settings, path)
    assert not settings.canonical_path.exists()


@pytest.mark.parametrize(
    "created_at", ["1960-01-01T00:00:00Z", "0001-01-01", "9999-12-31T23:00:00-05:00"]
)
def test_a_beacon_time_no_slack_ts_can_hold_is_refused_by_line(
    settings: Settings, tmp_path: Path, created_at: str
) -> None:
    # Before 1970 it became a negative ts, whose permalink `thread` refused; in the year
    # 10000 (UTC) a traceback.
    path = tmp_path / "chat.jsonl"
    line = {"local_id": "1", "channel": "eng", "author": "ana", "created_at": created_at}
    path.write_text(json.dumps({**line, "text": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(
        SlackqueryError, match=r"chat\.jsonl:1: created_at .* lies before 1970 or after the year"
    ):
        import_source(settings, path)
    assert not settings.canonical_path.exists()


def test_a_beacon_message_in_the_last_microsecond_of_9999_is_kept(
    settings: Settings, tmp_path: Path
) -> None:
    # The channel's creation time, a float division, rounded it into the year 10000.
    path = tmp_path / "chat.jsonl"
    last = "9999-12-31T23:59:59.999999Z"
    line = {"local_id": "1", "channel": "eng", "author": "ana", "created_at": last, "text": "x"}
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    import_source(settings, path)
    assert query(settings.canonical_path, "select ts from messages") == [("253402300799.999999",)]


def test_a_pipe_or_device_is_named_for_what_it_is(settings: Settings, tmp_path: Path) -> None:
    # `import /dev/null` said "no such file or folder" of a path that exists.
    pipe = tmp_path / "export.fifo"
    os.mkfifo(pipe)
    for path in (pipe, Path("/dev/null")):
        with pytest.raises(SlackqueryError, match=r": not a file or folder; give the export's"):
            import_source(settings, path)
    assert not settings.canonical_path.exists()


def test_json_files_saved_with_a_byte_order_mark_are_read(
    settings: Settings, tmp_path: Path
) -> None:
    # An export edited on Windows stopped the import: "malformed JSON (unexpected character)".
    members = {
        name: codecs.BOM_UTF8 + json.dumps(value).encode("utf-8")
        for name, value in default_members().items()
    }
    report = import_source(settings, write_export(tmp_path / "edited.zip", members))
    assert report["counts"]["messages"]["inserted"] == 10
    path = tmp_path / "chat.jsonl"
    line = {"local_id": "1", "channel": "eng", "author": "ana", "created_at": "2024-01-02"}
    path.write_bytes(codecs.BOM_UTF8 + json.dumps({**line, "text": "x"}).encode("utf-8"))
    assert import_source(settings, path)["counts"]["messages"]["inserted"] == 1


class _DiskFullOnCommit:
    """A store connection whose commit fails as DuckDB's does when the disk is full."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self._connection = connection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def commit(self) -> None:
        self._connection.rollback()  # a failed commit leaves no transaction open
        raise duckdb.TransactionException(
            'TransactionContext Error: Failed to commit: Could not write file "canonical.duckdb'
            '.wal": No space left on device'
        )


@pytest.mark.parametrize("existing", [False, True], ids=["new store", "existing store"])
def test_failed_commit_is_one_line_and_changes_nothing(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    existing: bool,
) -> None:
    if existing:
        import_source(settings, write_export(tmp_path / "good.zip", default_members()))
    before = snapshot(settings.canonical_path)
    real_open = store.open_store  # the fault is simulated; everything else is real
    monkeypatch.setattr(store, "open_store", lambda *args: _DiskFullOnCommit(real_open(*args)))
    members = default_members()
    members["general/2024-01-09.json"] = [msg("1704800000.000001", "would be new")]
    with pytest.raises(SlackqueryError) as failure:
        import_source(settings, write_export(tmp_path / "acme.zip", members))
    message = str(failure.value)
    assert message.startswith(f"{settings.canonical_path}: could not write the canonical store")
    assert "No space left on device" in message and "\n" not in message
    assert snapshot(settings.canonical_path) == before  # None: the new store file is removed
    # The marker stays beside a kept store: a commit that failed writing its log may have
    # torn it; the next open finds the run whole or absent, and clears it.
    kept = ["canonical.duckdb", "canonical.duckdb.committing", "canonical.duckdb.lock"]
    assert sorted(path.name for path in settings.canonical_path.parent.iterdir()) == (
        kept if existing else ["canonical.duckdb.lock"]
    )
    if existing:
        store.open_store(settings.canonical_path, settings.import_memory_limit).close()
        assert not (settings.canonical_path.parent / "canonical.duckdb.committing").exists()


def test_zip_with_a_repeated_entry_name_is_refused(settings: Settings, tmp_path: Path) -> None:
    path = write_export(tmp_path / "twice.zip", default_members())
    with zipfile.ZipFile(path, "a") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("general/2024-01-02.json", b"[]")
    with pytest.raises(
        SlackqueryError,
        match=r"twice\.zip: refusing ZIP entry 'general/2024-01-02\.json': the name appears twice",
    ):
        import_source(settings, path)
    assert not settings.canonical_path.exists()


def test_zip_holding_two_exports_is_refused(settings: Settings, tmp_path: Path) -> None:
    members = {
        f"{folder}/{name}": value
        for folder in ("a", "b")
        for name, value in default_members().items()
    }
    with pytest.raises(
        SlackqueryError,
        match=r"two\.zip: holds 2 exports \(a/, b/\); unpack it and import each folder",
    ):
        import_source(settings, write_export(tmp_path / "two.zip", members))
    assert not settings.canonical_path.exists()


def test_files_beside_the_export_folder_are_a_warning(settings: Settings, tmp_path: Path) -> None:
    members = {f"acme/{name}": value for name, value in default_members().items()}
    members["__MACOSX/acme/._users.json"] = b"\x00"
    members["notes/2024-01-02.json"] = [msg("1704200900.000001", "not in the export")]
    report = import_source(settings, write_export(tmp_path / "wrapped.zip", members))
    assert report["counts"]["messages"]["inserted"] == 10
    assert report["warnings"] == [
        {
            "file": f"wrapped.zip:{name}",
            "problem": "outside the export folder 'acme/': 1 file(s) not read",
        }
        for name in ("__MACOSX", "notes")
    ]


def test_beacon_input_that_is_a_folder(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    with pytest.raises(
        SlackqueryError, match=r"corpus: is a folder; a Beacon JSON-lines input is one \.jsonl file"
    ):
        import_source(settings, folder, source_format="beacon-jsonl")
    assert not settings.canonical_path.exists()


@pytest.mark.parametrize(
    ("odd", "problem"),
    [
        ({"user": {"id": "U01"}}, "has a user that is not a user id (dict)"),
        ({"reply_count": 2**40}, "has a reply_count out of range"),
        ({"files": [{"id": "F9", "size": 2**63}]}, "shares a file whose size is out of range"),
    ],
    ids=["user-object", "reply-count", "file-size"],
)
def test_a_message_the_store_cannot_hold_is_skipped_with_warning(
    settings: Settings, tmp_path: Path, odd: dict[str, Any], problem: str
) -> None:
    members = default_members()
    members["general/2024-01-02.json"].append({**msg("1704200700.000001", "odd"), **odd})
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["messages_skipped"] == 1
    assert report["counts"]["messages"]["inserted"] == 10
    assert report["warnings"][0]["problem"] == f"message ts=1704200700.000001 {problem}: skipped"


def test_a_zip_given_as_beacon_jsonl_is_named_a_zip(settings: Settings, tmp_path: Path) -> None:
    archive = write_export(tmp_path / "sample.zip", default_members())
    with pytest.raises(SlackqueryError) as failure:
        import_source(settings, archive, source_format="beacon-jsonl")
    assert str(failure.value) == (
        f"{archive}: is a ZIP archive, not a Beacon JSON-lines file; import a Slack export "
        "ZIP with --format slack-export"
    )
    assert not settings.canonical_path.exists()


def _damage(path: Path, name: str, how: str) -> Path:
    """Rewrite one member's bytes in place: its data, or its flags / method in both headers."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
        central = archive.start_dir
    local = info.header_offset
    start = local + 30 + len(info.filename.encode()) + len(info.extra)
    while data[central + 46 : central + 46 + len(name)] != name.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    if how == "damaged":
        data[start] = 0xFF  # a deflate block of the reserved type
    elif how == "encrypted":
        data[local + 6] |= 0x01
        data[central + 8] |= 0x01
    else:
        data[local + 8 : local + 10] = data[central + 10 : central + 12] = (99).to_bytes(
            2, "little"
        )
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("how", "problem"),
    [
        (
            "damaged",
            "damaged in the ZIP file (Error -3 while decompressing data: invalid block type)",
        ),
        (
            "encrypted",
            "encrypted (password-protected) ZIP entry; unpack the ZIP with its password and "
            "import the folder",
        ),
        (
            "unsupported",
            "compressed in a way this reader does not support (That compression method is not "
            "supported); unpack the ZIP with another tool and import the folder",
        ),
    ],
)
def test_an_unreadable_zip_member_is_one_line_naming_it(
    settings: Settings, tmp_path: Path, how: str, problem: str
) -> None:
    path = _damage(write_export(tmp_path / "acme.zip", default_members()), "users.json", how)
    with pytest.raises(SlackqueryError) as failure:
        import_source(settings, path)
    assert str(failure.value) == f"acme.zip:users.json: {problem}"
    assert not settings.canonical_path.exists()


def test_a_truncated_zip_is_named_truncated(settings: Settings, tmp_path: Path) -> None:
    path = write_export(tmp_path / "acme.zip", default_members())
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(SlackqueryError) as failure:
        import_source(settings, path)
    assert str(failure.value) == (
        f"{path}: truncated or damaged ZIP file (it starts as one but its directory at the end "
        "is missing; was the download or copy cut short?)"
    )


def test_odd_list_fields_are_left_out_of_the_rows(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["users.json"] = [*members["users.json"]]  # a copy: the list is shared
    members["users.json"][1] = {**members["users.json"][1], "profile": "oops"}
    general, eng = members["channels.json"]
    members["channels.json"] = [
        {**general, "created": 1e20, "members": 5},
        {**eng, "created": -1e12},
    ]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["counts"]["messages"]["inserted"] == 10
    assert _problems(report) == [
        "conversation C01: members is not a list of user ids (only the ids in it are kept)"
    ]
    assert query(
        settings.canonical_path,
        "select channel_id, created_at, member_ids from channels where channel_id like 'C%' "
        "order by 1",
    ) == [("C01", None, []), ("C02", None, ["U01"])]
    assert query(
        settings.canonical_path, "select real_name, display_name from users where user_id = 'U02'"
    ) == [("Bob Brown", None)]


def test_a_null_conversation_list_reads_as_empty(settings: Settings, tmp_path: Path) -> None:
    members = default_members()
    members["channels.json"] = None  # older slackdump exports of DMs only
    for name in ("general/2024-01-02.json", "general/2024-01-03.json", "eng/2024-01-04.json"):
        del members[name]
    report = import_source(settings, write_export(tmp_path / "dms.zip", members))
    assert report["counts"]["messages"]["inserted"] == 3
    assert report["warnings"] == [
        {"file": "dms.zip:channels.json", "problem": "null, read as an empty list"}
    ]


def test_a_conversation_whose_id_is_no_slack_id_is_skipped_with_one_warning(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    members["channels.json"] = [
        *members["channels.json"],
        {"id": "C:COLON:1", "name": "colon-chan"},
        {"id": "C/SLASH?x=1#", "name": "slash-chan"},
    ]
    members["colon-chan/2024-01-02.json"] = [msg("1704200900.000001", "colon")]
    members["slash-chan/2024-01-02.json"] = [msg("1704200900.000002", "slash")]
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert report["warnings"] == [
        {
            "file": "acme.zip:channels.json",
            "problem": f"conversation id {channel_id!r} is not a Slack id (uppercase letters "
            f"and digits): skipped, with the day files of its folder {folder!r}",
        }
        for channel_id, folder in [("C:COLON:1", "colon-chan"), ("C/SLASH?x=1#", "slash-chan")]
    ]
    assert report["counts"]["messages"]["inserted"] == 10
    assert query(settings.canonical_path, "select channel_id from channels order by 1") == [
        ("C01",),
        ("C02",),
        ("D01",),
        ("G01",),
        ("G02",),
    ]


def test_an_unreadable_thread_ts_or_edited_ts_is_left_out_with_a_warning(
    settings: Settings, tmp_path: Path
) -> None:
    members = default_members()
    day = members["general/2024-01-02.json"]
    day[1] = {**day[1], "thread_ts": "abc"}
    day[2] = {**day[2], "edited": {"user": "U01", "ts": "zzz"}}
    report = import_source(settings, write_export(tmp_path / "acme.zip", members))
    assert _problems(report) == [
        "message ts=1704200060.000200 has an unreadable thread_ts ('abc'): stored unthreaded",
        "message ts=1704200120.000300 has an unreadable edited.ts ('zzz'): ignored",
    ]
    assert report["counts"]["messages"]["inserted"] == 10
    assert query(
        settings.canonical_path,
        "select ts, thread_ts, is_thread_reply, is_edited, edited_ts from messages "
        "where ts in ('1704200060.000200', '1704200120.000300') order by ts",
    ) == [
        ("1704200060.000200", None, False, False, None),
        ("1704200120.000300", "1704200000.000100", True, True, None),
    ]
