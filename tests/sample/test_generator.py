"""The sample generator writes a valid, deterministic Slack export with its planted facts."""

import re
import zipfile
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import yaml

from slackquery.errors import SlackqueryError
from slackquery.sample import generate_sample, planted
from slackquery.sample.workspace import TEAM_ID

ROOT_FILES = {"channels.json", "groups.json", "dms.json", "mpims.json", "users.json"}
TS = re.compile(r"^\d{10}\.\d{6}$")
DAY_FILE = re.compile(r"^([^/]+)/(\d{4}-\d{2}-\d{2})\.json$")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A 600-message sample, generated once for the structural tests."""
    out = tmp_path_factory.mktemp("small") / "sample.zip"
    return out, generate_sample(out, messages=600, seed=7)


@pytest.fixture(scope="module")
def medium(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A 4,000-message sample, big enough that every rare message feature occurs."""
    out = tmp_path_factory.mktemp("medium") / "sample.zip"
    return out, generate_sample(out, messages=4000, seed=11)


def _conversations(path: Path) -> tuple[dict, dict[str, list[tuple[str, dict]]]]:
    """Root JSON files by name, and (file date, message) pairs per conversation folder."""
    roots: dict = {}
    folders: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            payload = orjson.loads(archive.read(name))
            match = DAY_FILE.match(name)
            if match:
                assert isinstance(payload, list) and payload, name
                folders[match.group(1)].extend((match.group(2), m) for m in payload)
            else:
                assert "/" not in name, name
                roots[name] = payload
    return roots, folders


def _folder_ids(roots: dict) -> dict[str, str]:
    """Export folder name -> conversation id, per the export's naming rules."""
    ids = {entry["name"]: entry["id"] for entry in roots["channels.json"]}
    ids |= {entry["name"]: entry["id"] for entry in roots["groups.json"]}
    ids |= {entry["id"]: entry["id"] for entry in roots["dms.json"]}
    ids |= {entry["name"]: entry["id"] for entry in roots["mpims.json"]}
    return ids


def test_same_seed_and_size_give_byte_identical_output(tmp_path: Path) -> None:
    first = generate_sample(tmp_path / "a" / "one.zip", messages=700, seed=3)
    second = generate_sample(tmp_path / "b" / "one.zip", messages=700, seed=3)
    assert Path(first["path"]).read_bytes() == Path(second["path"]).read_bytes()
    assert Path(first["queries_path"]).read_bytes() == Path(second["queries_path"]).read_bytes()
    other = generate_sample(tmp_path / "c" / "one.zip", messages=700, seed=4)
    assert Path(other["path"]).read_bytes() != Path(first["path"]).read_bytes()


def test_export_layout_and_counts(small: tuple[Path, dict]) -> None:
    path, summary = small
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        assert names == sorted(names)
        assert {info.date_time for info in archive.infolist()} == {(2024, 1, 1, 0, 0, 0)}
    assert set(names) >= ROOT_FILES
    roots, folders = _conversations(path)
    ids = _folder_ids(roots)
    assert set(folders) <= set(ids)
    assert {entry["id"][0] for entry in roots["dms.json"]} == {"D"}
    assert all(name.startswith("mpdm-") for name in (e["name"] for e in roots["mpims.json"]))
    assert roots["groups.json"] and len(roots["channels.json"]) >= 5
    assert sum(len(messages) for messages in folders.values()) == 600 == summary["messages"]
    assert summary["day_files"] == sum(len({d for d, _ in m}) for m in folders.values())
    users = roots["users.json"]
    assert len([u for u in users if not u["is_bot"] and not u["deleted"]]) >= 10
    assert {u["team_id"] for u in users} == {TEAM_ID}
    assert any(u["deleted"] for u in users) and any(u["is_bot"] for u in users)
    names_seen = {u["real_name"] for u in users}
    assert {"Zoë Ångström", "José Núñez"} <= names_seen


def test_messages_follow_the_export_format(small: tuple[Path, dict]) -> None:
    path, _ = small
    roots, folders = _conversations(path)
    user_ids = {user["id"] for user in roots["users.json"]}
    for folder, messages in folders.items():
        by_ts: dict[str, dict] = {}
        for day, message in messages:
            assert message["type"] == "message"
            ts = message["ts"]
            assert TS.match(ts), ts
            assert ts not in by_ts, f"duplicate ts {ts} in {folder}"
            by_ts[ts] = message
            posted = datetime.fromtimestamp(int(ts.split(".")[0]), tz=UTC).date().isoformat()
            assert posted == day, (folder, ts)
            assert isinstance(message["text"], str)
            if message.get("subtype") == "bot_message":
                assert message["bot_id"].startswith("B")
            else:
                assert message["user"] in user_ids
        replies = Counter()
        for ts, message in by_ts.items():
            thread_ts = message.get("thread_ts")
            if thread_ts and thread_ts != ts:
                parent = by_ts[thread_ts]
                assert parent["thread_ts"] == thread_ts
                assert float(ts) > float(thread_ts)
                assert message["parent_user_id"] == parent["user"]
                replies[thread_ts] += 1
        for thread_ts, count in replies.items():
            parent = by_ts[thread_ts]
            assert parent["reply_count"] == count and 1 <= count <= 20
            assert parent["latest_reply"] == max((r["ts"] for r in parent["replies"]), key=float)
        parents = [m for ts, m in by_ts.items() if m.get("reply_count")]
        assert {m["ts"] for m in parents} == set(replies)


def test_every_message_feature_occurs(medium: tuple[Path, dict]) -> None:
    path, _ = medium
    _, folders = _conversations(path)
    messages = [message for pairs in folders.values() for _, message in pairs]
    subtypes = Counter(message.get("subtype") for message in messages)
    expected = {
        "bot_message", "thread_broadcast", "channel_join", "channel_leave", "channel_topic",
        "channel_purpose", "pinned_item",
    }  # fmt: skip
    assert expected <= set(subtypes)
    text = "\n".join(message["text"] for message in messages)
    for pattern in (
        r"<@U0SQ\d{5}>",
        r"<#C\w+\|[\w-]+>",
        r"<!here>",
        r"<!subteam\^S\w+\|@[\w-]+>",
        r"<!date\^\d+\^\{date_short\}\|\w{3} \d{1,2}, \d{4}>",
        r"<https://[^|>]+\|[^>]+>",
        r"```\n",
        r"`[^`\n]+`",
        r":[a-z_+0-9]+:",
        r"\b28P01\b",
        r"\bERR-\d+\b",
        r"\bv\d+\.\d+\.\d+\b",
        r"\b[A-Z]{2,4}-\d{3,4}\b",
    ):
        assert re.search(pattern, text), pattern
    assert any("edited" in m for m in messages)
    assert any("reactions" in m for m in messages)
    assert any(m.get("files") and m["files"][0]["id"].startswith("F") for m in messages)
    assert any("bot_id" in m and "user" not in m for m in messages)


def test_vocabulary_is_long_tailed(medium: tuple[Path, dict]) -> None:
    path, _ = medium
    _, folders = _conversations(path)
    words = Counter(
        word
        for pairs in folders.values()
        for _, message in pairs
        for word in re.findall(r"[a-z]{3,}", message["text"].lower())
    )
    ranked = [count for _, count in words.most_common()]
    assert len(ranked) > 400
    top_decile = sum(ranked[: len(ranked) // 10])
    assert top_decile > 0.5 * sum(ranked)
    assert ranked[-1] <= 2


@pytest.mark.parametrize("fixture", ["small", "medium"])
def test_planted_messages_are_in_the_export_with_their_ids(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path, summary = request.getfixturevalue(fixture)
    roots, folders = _conversations(path)
    ids = _folder_ids(roots)
    exported = {
        f"{TEAM_ID}:{ids[folder]}:{message['ts']}": message
        for folder, pairs in folders.items()
        for _, message in pairs
    }
    for item in planted.MESSAGES:
        message = exported[item.message_id]
        assert message["text"] == item.text
        assert message["user"] == next(
            u["id"] for u in roots["users.json"] if u["name"] == item.author
        )
        if item.parent:
            assert message["thread_ts"] == planted.BY_KEY[item.parent].ts
    document = yaml.safe_load(Path(summary["queries_path"]).read_text(encoding="utf-8"))
    cited = set()
    for query in document["queries"]:
        cited |= set(query["relevant"])
        for group in query["evidence_groups"]:
            cited |= set(group["message_ids"])
    assert cited and cited <= set(exported)
    assert cited <= {item.message_id for item in planted.MESSAGES}


def test_planted_ids_do_not_depend_on_size_or_seed(tmp_path: Path) -> None:
    first = generate_sample(tmp_path / "a.zip", messages=500, seed=1)
    second = generate_sample(tmp_path / "b.zip", messages=2500, seed=99)
    load = [
        yaml.safe_load(Path(s["queries_path"]).read_text(encoding="utf-8"))["queries"]
        for s in (first, second)
    ]
    assert [q["relevant"] for q in load[0]] == [q["relevant"] for q in load[1]]
    assert [q["evidence_groups"] for q in load[0]] == [q["evidence_groups"] for q in load[1]]


def test_query_file_uses_the_beacon_format(medium: tuple[Path, dict]) -> None:
    path, summary = medium
    document = yaml.safe_load(Path(summary["queries_path"]).read_text(encoding="utf-8"))
    queries = document["queries"]
    assert summary["queries"] == len(queries) and len({q["id"] for q in queries}) == len(queries)
    roots, folders = _conversations(path)
    channel_names = {c["name"] for c in roots["channels.json"] + roots["groups.json"]}
    handles = {u["name"] for u in roots["users.json"]}
    all_text = "\n".join(m["text"].lower() for pairs in folders.values() for _, m in pairs)
    for query in queries:
        assert {"id", "type", "split", "query", "answerable", "answer", "parts"} <= set(query)
        assert {"evidence_groups", "relevant", "filters", "fact_ids"} <= set(query)
        assert set(query["filters"]) == {"channel", "author", "after", "before"}
        if query["filters"]["channel"]:
            assert query["filters"]["channel"] in channel_names
        if query["filters"]["author"]:
            assert query["filters"]["author"] in handles
        if query["answerable"]:
            assert query["answer"] and query["parts"] and query["evidence_groups"]
            assert {g["part"] for g in query["evidence_groups"]} == {
                p["id"] for p in query["parts"]
            }
            assert 3 in query["relevant"].values()
            assert all(grade in (1, 2, 3) for grade in query["relevant"].values())
        else:
            assert query["relevant"] == {} and query["answer"] is None
            for term, count in query["absence_check"]["terms"].items():
                assert all_text.count(term) == count == 0, term
    types = Counter(q["type"] for q in queries)
    assert types["unanswerable"] == 2 and types["exact"] >= 2 and types["paraphrase"] >= 2
    assert any(q["filters"]["channel"] for q in queries)


def test_exact_queries_name_identifiers_of_their_planted_message() -> None:
    for query in planted.QUERIES:
        if query.type != "exact":
            continue
        identifiers = re.findall(r"\b(?:\w*\d\w*(?:[.-]\w+)*|\w+_\w+)\b", query.query)
        assert identifiers, query.id
        planted_text = " ".join(planted.BY_KEY[key].text for key, grade in query.relevant)
        assert all(identifier in planted_text for identifier in identifiers), query.id


@pytest.mark.parametrize(
    ("name", "messages", "seed", "problem"),
    [
        ("tiny.zip", 10, 7, "--messages"),
        ("sample.tar", 600, 7, ".zip"),
        ("sample.zip", 600, -1, "--seed"),
    ],
)
def test_bad_arguments_are_user_errors(
    tmp_path: Path, name: str, messages: int, seed: int, problem: str
) -> None:
    with pytest.raises(SlackqueryError, match=re.escape(problem)):
        generate_sample(tmp_path / name, messages=messages, seed=seed)
    assert list(tmp_path.iterdir()) == []


def test_planted_only_terms_never_occur_in_background(medium: tuple[Path, dict]) -> None:
    path, _ = medium
    _, folders = _conversations(path)
    planted_ts = {item.ts for item in planted.MESSAGES}
    background = "\n".join(
        message["text"]
        for pairs in folders.values()
        for _, message in pairs
        if message["ts"] not in planted_ts
    )
    for term in planted.PLANTED_ONLY_TERMS:
        assert not re.search(rf"(?<![\w.-]){re.escape(term)}(?![\w-]|\.\d)", background), term
