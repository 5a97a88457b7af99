"""Loading and validating judged query files (Beacon YAML format)."""

import datetime as dt
from pathlib import Path

import pytest
import yaml

from slackquery.errors import SlackqueryError
from slackquery.evaluation.queries import load_queries, parse_queries, select_split

BEACON = Path(__file__).resolve().parents[3] / "shared/benchmarks/beacon/queries-dev.yaml"


def _query(**changes: object) -> dict:
    query = {
        "id": "Q1",
        "split": "dev",
        "query": "what changed about the database?",
        "answerable": True,
        "evidence_groups": [{"part": "p1", "message_ids": ["synthetic:eng:20260914-02"]}],
        "relevant": {"synthetic:eng:20260914-02": 3},
        "filters": {"channel": None, "author": None, "after": None, "before": None},
        "request_time": "2026-10-05T10:00:00+05:30",
    }
    query.update(changes)
    return query


def _error(document: object) -> str:
    with pytest.raises(SlackqueryError) as info:
        parse_queries(document, source="q.yaml")
    return str(info.value)


def test_parses_a_query_with_filters() -> None:
    [query] = parse_queries(
        {
            "queries": [
                _query(
                    filters={
                        "channel": "#build-help",
                        "author": "nikhil",
                        "after": "2026-09-28",
                        "before": "2026-09-29",
                    }
                )
            ]
        }
    )
    assert query.filters.channel == "build-help"
    assert query.filters.after == dt.date(2026, 9, 28)
    assert query.evidence_ids == {"synthetic:eng:20260914-02"}
    start, end = query.filters.ts_bounds_us(query.timezone)
    # 2026-09-28T00:00+05:30 is 2026-09-27T18:30Z; before is exclusive.
    expected_start = int(dt.datetime(2026, 9, 27, 18, 30, tzinfo=dt.UTC).timestamp()) * 10**6
    assert start == expected_start
    assert end == expected_start + 86_400 * 10**6 - 1


def test_without_request_time_dates_are_utc() -> None:
    [query] = parse_queries(
        {"queries": [_query(request_time=None, filters={"after": dt.date(1970, 1, 2)})]}
    )
    assert query.filters.ts_bounds_us(query.timezone) == (86_400 * 10**6, None)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "expected a mapping with a `queries:` list"),
        ({"queries": []}, "`queries` must be a non-empty list"),
        ({"queries": ["x"]}, "query #1: expected a mapping"),
        ({"queries": [_query(id="")]}, "`id` must be a non-empty string"),
        ({"queries": [_query(), _query()]}, "duplicate query id 'Q1'"),
        ({"queries": [_query(split="train")]}, "query Q1: `split` must be one of dev, test"),
        ({"queries": [_query(query="  ")]}, "`query` must be a non-empty string"),
        ({"queries": [_query(answerable="yes")]}, "`answerable` must be true or false"),
        ({"queries": [_query(evidence_groups=[])]}, "needs at least one evidence group"),
        ({"queries": [_query(answerable=False)]}, "must have no evidence groups"),
        (
            {"queries": [_query(evidence_groups=[{"part": "p1", "message_ids": []}])]},
            "evidence_groups[0].message_ids must be a non-empty list",
        ),
        ({"queries": [_query(relevant={"m": 5})]}, "relevant['m'] must be a grade from 0 to 3"),
        ({"queries": [_query(filters={"chanel": "eng"})]}, "unknown filter 'chanel'"),
        ({"queries": [_query(filters={"after": "Sep 14"})]}, "filters.after must be a date"),
        (
            {"queries": [_query(filters={"after": "2026-09-14", "before": "2026-09-14"})]},
            "must be earlier than filters.before",
        ),
        ({"queries": [_query(request_time="noon")]}, "`request_time` must be an ISO 8601"),
    ],
)
def test_malformed_files_get_one_clear_error(document: object, message: str) -> None:
    assert message in _error(document)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SlackqueryError, match=r"missing\.yaml: query file not found"):
        load_queries(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("queries:\n  - id: [unclosed\n", encoding="utf-8")
    with pytest.raises(SlackqueryError, match=r"broken.yaml: not valid YAML at line \d"):
        load_queries(broken)


def test_split_selection(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    document = {"queries": [_query(id="A"), _query(id="B", split="test")]}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    queries = load_queries(path)
    assert [q.id for q in select_split(queries, "dev")] == ["A"]
    assert [q.id for q in select_split(queries, "test")] == ["B"]
    assert [q.id for q in select_split(queries, "all")] == ["A", "B"]


@pytest.mark.skipif(not BEACON.exists(), reason="Beacon benchmark not present beside the repo")
def test_loads_the_beacon_dev_queries() -> None:
    queries = load_queries(BEACON)
    assert len(queries) == 23
    assert sum(q.answerable for q in queries) == 20
    q42 = next(q for q in queries if q.id == "Q42")
    assert (q42.filters.channel, q42.filters.author) == ("build-help", "nikhil")
