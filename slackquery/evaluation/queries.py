"""Judged query files in the Beacon YAML format, loaded and checked before anything runs.

A typo in a judged file silently changes every figure computed from it (a misspelt filter
key drops the filter, an empty evidence group makes a query unanswerable by construction),
so loading is strict: every problem is a `SlackqueryError` naming the file, the query and
the field. Keys the evaluation does not use (`answer`, `parts`, `tags`, ...) are allowed
and ignored, so the same file can carry material for answer-level evaluation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slackquery.errors import SlackqueryError

SPLITS = ("dev", "test")
FILTER_KEYS = ("channel", "author", "after", "before")
MAX_GRADE = 3


@dataclass(frozen=True)
class EvidenceGroup:
    """One part of a query's answer: retrieving any one of its messages covers the part."""

    part: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class QueryFilters:
    """Beacon's optional filters: channel and author names, `after` inclusive and `before`
    exclusive calendar dates."""

    channel: str | None = None
    author: str | None = None
    after: dt.date | None = None
    before: dt.date | None = None

    def ts_bounds_us(self, tz: dt.tzinfo) -> tuple[int | None, int | None]:
        """Inclusive `(start_ts_us, end_ts_us)` for the search request.

        Dates are calendar days in `tz` (the query's request time zone: a Beacon team in
        +05:30 means "Sep 28" in their local time). `before` is exclusive, so the inclusive
        end is one microsecond before that day starts.
        """
        start = _day_start_us(self.after, tz) if self.after else None
        end = _day_start_us(self.before, tz) - 1 if self.before else None
        return start, end

    def is_empty(self) -> bool:
        """True when no filter is set."""
        return not (self.channel or self.author or self.after or self.before)


@dataclass(frozen=True)
class JudgedQuery:
    """One judged query: the text, its filters and what counts as a correct result."""

    id: str
    split: str
    query: str
    answerable: bool
    evidence_groups: tuple[EvidenceGroup, ...]
    relevant: Mapping[str, int] = field(default_factory=dict)
    filters: QueryFilters = field(default_factory=QueryFilters)
    request_time: dt.datetime | None = None
    type: str | None = None

    @property
    def timezone(self) -> dt.tzinfo:
        """Time zone the date filters are read in: the request time's, else UTC."""
        if self.request_time is not None and self.request_time.tzinfo is not None:
            return self.request_time.tzinfo
        return dt.UTC

    @property
    def evidence_ids(self) -> frozenset[str]:
        """Every message id of every evidence group."""
        return frozenset(mid for group in self.evidence_groups for mid in group.message_ids)


def _day_start_us(day: dt.date, tz: dt.tzinfo) -> int:
    start = dt.datetime(day.year, day.month, day.day, tzinfo=tz)
    delta = start - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def load_queries(path: Path | str) -> list[JudgedQuery]:
    """Read and validate a judged query file; raise `SlackqueryError` on the first problem."""
    path = Path(path)
    return parse_queries(read_yaml(path, "query file"), source=str(path))


def read_yaml(path: Path, kind: str) -> Any:
    """The YAML document of `path` (a `kind` of file: "query file", "grid file"); every
    problem is one line naming the file (PyYAML's own message spans several)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SlackqueryError(f"{path}: {kind} not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SlackqueryError(f"{path}: cannot read {kind} ({error})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SlackqueryError(f"{path}: not valid YAML{where}") from None


def parse_queries(document: Any, *, source: str = "<queries>") -> list[JudgedQuery]:
    """Validate an already-parsed query document (`{"queries": [...]}`)."""
    if not isinstance(document, Mapping) or "queries" not in document:
        raise SlackqueryError(f"{source}: expected a mapping with a `queries:` list")
    raw_queries = document["queries"]
    if not isinstance(raw_queries, list) or not raw_queries:
        raise SlackqueryError(f"{source}: `queries` must be a non-empty list")
    queries: list[JudgedQuery] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_queries, start=1):
        query = _parse_query(raw, source=source, index=index)
        if query.id in seen:
            raise SlackqueryError(f"{source}: duplicate query id {query.id!r}")
        seen.add(query.id)
        queries.append(query)
    return queries


def select_split(queries: list[JudgedQuery], split: str) -> list[JudgedQuery]:
    """The queries of one split, or all of them for `all`."""
    if split == "all":
        return list(queries)
    return [query for query in queries if query.split == split]


def without_filters(queries: list[JudgedQuery]) -> list[JudgedQuery]:
    """The queries as their text alone, as `slackquery search QUESTION` runs them: the
    protocol of the held-out benchmark, which sends no filters."""
    return [dataclasses.replace(query, filters=QueryFilters()) for query in queries]


def _parse_query(raw: Any, *, source: str, index: int) -> JudgedQuery:
    where = f"{source}: query #{index}"
    if not isinstance(raw, Mapping):
        raise SlackqueryError(f"{where}: expected a mapping")
    query_id = raw.get("id")
    if not isinstance(query_id, str) or not query_id.strip():
        raise SlackqueryError(f"{where}: `id` must be a non-empty string")
    where = f"{source}: query {query_id}"

    split = raw.get("split")
    if split not in SPLITS:
        raise SlackqueryError(f"{where}: `split` must be one of {', '.join(SPLITS)}, got {split!r}")
    text = raw.get("query")
    if not isinstance(text, str) or not text.strip():
        raise SlackqueryError(f"{where}: `query` must be a non-empty string")
    answerable = raw.get("answerable")
    if not isinstance(answerable, bool):
        raise SlackqueryError(f"{where}: `answerable` must be true or false")

    groups = _parse_groups(raw.get("evidence_groups"), where=where)
    if answerable and not groups:
        raise SlackqueryError(f"{where}: an answerable query needs at least one evidence group")
    if not answerable and groups:
        raise SlackqueryError(f"{where}: an unanswerable query must have no evidence groups")

    relevant = _parse_relevant(raw.get("relevant"), where=where)
    query_type = raw.get("type")
    if query_type is not None and not isinstance(query_type, str):
        raise SlackqueryError(f"{where}: `type` must be a string")
    return JudgedQuery(
        id=query_id,
        split=split,
        query=text.strip(),
        answerable=answerable,
        evidence_groups=groups,
        relevant=relevant,
        filters=_parse_filters(raw.get("filters"), where=where),
        request_time=_parse_request_time(raw.get("request_time"), where=where),
        type=query_type,
    )


def _parse_groups(raw: Any, *, where: str) -> tuple[EvidenceGroup, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SlackqueryError(f"{where}: `evidence_groups` must be a list")
    groups = []
    for index, group in enumerate(raw):
        at = f"{where}: evidence_groups[{index}]"
        if not isinstance(group, Mapping):
            raise SlackqueryError(f"{at} must be a mapping with `part` and `message_ids`")
        part = group.get("part", f"g{index + 1}")
        if not isinstance(part, str) or not part:
            raise SlackqueryError(f"{at}.part must be a non-empty string")
        ids = group.get("message_ids")
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(mid, str) and mid for mid in ids)
        ):
            raise SlackqueryError(f"{at}.message_ids must be a non-empty list of message ids")
        groups.append(EvidenceGroup(part=part, message_ids=tuple(dict.fromkeys(ids))))
    return tuple(groups)


def _parse_relevant(raw: Any, *, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SlackqueryError(f"{where}: `relevant` must map message ids to grades")
    relevant = {}
    for message_id, grade in raw.items():
        if not isinstance(message_id, str) or not message_id:
            raise SlackqueryError(f"{where}: `relevant` keys must be message ids")
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= MAX_GRADE:
            raise SlackqueryError(
                f"{where}: relevant[{message_id!r}] must be a grade from 0 to {MAX_GRADE}"
            )
        relevant[message_id] = grade
    return relevant


def _parse_filters(raw: Any, *, where: str) -> QueryFilters:
    if raw is None:
        return QueryFilters()
    if not isinstance(raw, Mapping):
        raise SlackqueryError(f"{where}: `filters` must be a mapping")
    unknown = sorted(set(raw) - set(FILTER_KEYS))
    if unknown:
        raise SlackqueryError(
            f"{where}: unknown filter {unknown[0]!r} (allowed: {', '.join(FILTER_KEYS)})"
        )
    names = {}
    for key in ("channel", "author"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise SlackqueryError(f"{where}: filters.{key} must be a name or null")
        names[key] = value.strip().lstrip("#@") if value else None
    after = _parse_date(raw.get("after"), where=f"{where}: filters.after")
    before = _parse_date(raw.get("before"), where=f"{where}: filters.before")
    if after and before and after >= before:
        raise SlackqueryError(
            f"{where}: filters.after ({after}) must be earlier than filters.before ({before}, "
            "exclusive)"
        )
    return QueryFilters(
        channel=names["channel"], author=names["author"], after=after, before=before
    )


def _parse_date(raw: Any, *, where: str) -> dt.date | None:
    if raw is None:
        return None
    if isinstance(raw, dt.datetime):
        raise SlackqueryError(f"{where} must be a date (YYYY-MM-DD), not a date and time")
    if isinstance(raw, dt.date):
        return raw
    if isinstance(raw, str):
        try:
            return dt.date.fromisoformat(raw)
        except ValueError:
            pass
    raise SlackqueryError(f"{where} must be a date (YYYY-MM-DD), got {raw!r}")


def _parse_request_time(raw: Any, *, where: str) -> dt.datetime | None:
    if raw is None:
        return None
    if isinstance(raw, dt.datetime):
        return raw
    if isinstance(raw, str):
        try:
            return dt.datetime.fromisoformat(raw)
        except ValueError:
            pass
    raise SlackqueryError(f"{where}: `request_time` must be an ISO 8601 date and time")
