"""Prometheus text metrics for `/metrics`: request and error counts, latency histograms,
the artifact served and when it was built.

Hand-written exposition format (a dozen lines) instead of a client library dependency;
labels are tool names, modes and failure kinds from fixed sets, never user input.
"""

import threading
from collections import Counter
from dataclasses import dataclass, field

from slackquery.artifacts.files import build_time

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Why a call failed, the `kind` of `slackquery_errors_total`: the request's own fault
# (`refused`: bad arguments or input, nothing found; `timeout`: its time budget spent) or
# the server's (`busy`: the in-flight cap; `unavailable`: no servable artifact or embedder;
# `internal`: a bug). Alert on the server's.
FAILURE_KINDS = ("refused", "timeout", "busy", "unavailable", "internal")


@dataclass
class _Series:
    count: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    total_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_S))


class Metrics:
    """Thread-safe counters per (tool, mode)."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._lock = threading.Lock()
        self.artifact_id: str | None = None

    def observe(self, tool: str, mode: str, seconds: float, *, failure: str | None) -> None:
        """Record one finished call; `failure`: None, or one of `FAILURE_KINDS`."""
        assert failure is None or failure in FAILURE_KINDS, failure
        with self._lock:
            series = self._series.setdefault((tool, mode), _Series())
            series.count += 1
            if failure is not None:
                series.errors[failure] += 1
            series.total_s += seconds
            for index, bound in enumerate(BUCKETS_S):
                if seconds <= bound:
                    series.buckets[index] += 1

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        lines = [
            "# HELP slackquery_requests_total Tool calls by tool and mode.",
            "# TYPE slackquery_requests_total counter",
        ]
        with self._lock:
            items = sorted(self._series.items())
            for (tool, mode), series in items:
                lines.append(
                    f'slackquery_requests_total{{tool="{tool}",mode="{mode}"}} {series.count}'
                )
            lines += [
                "# HELP slackquery_errors_total Tool calls that returned an error, by kind: "
                "refused, timeout (the request's fault); busy, unavailable, internal (the "
                "server's).",
                "# TYPE slackquery_errors_total counter",
            ]
            for (tool, mode), series in items:
                for kind, count in sorted(series.errors.items()):
                    labels = f'tool="{tool}",mode="{mode}",kind="{kind}"'
                    lines.append(f"slackquery_errors_total{{{labels}}} {count}")
            lines += [
                "# HELP slackquery_request_seconds Tool call latency.",
                "# TYPE slackquery_request_seconds histogram",
            ]
            for (tool, mode), series in items:
                labels = f'tool="{tool}",mode="{mode}"'
                for bound, count in zip(BUCKETS_S, series.buckets, strict=True):
                    lines.append(
                        f'slackquery_request_seconds_bucket{{{labels},le="{bound}"}} {count}'
                    )
                lines.append(
                    f'slackquery_request_seconds_bucket{{{labels},le="+Inf"}} {series.count}'
                )
                lines.append(f"slackquery_request_seconds_sum{{{labels}}} {series.total_s:.6f}")
                lines.append(f"slackquery_request_seconds_count{{{labels}}} {series.count}")
            artifact = self.artifact_id
        lines += [
            "# HELP slackquery_artifact_info The artifact the last successful call used.",
            "# TYPE slackquery_artifact_info gauge",
        ]
        if artifact:
            escaped = artifact.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'slackquery_artifact_info{{artifact_id="{escaped}"}} 1')
        built = build_time(artifact) if artifact else None
        lines += [
            "# HELP slackquery_artifact_built_timestamp_seconds When the build of the artifact "
            "the last successful call used started; a build follows new input, so its age is "
            "how long nothing new was published (a quiet workspace ages it too).",
            "# TYPE slackquery_artifact_built_timestamp_seconds gauge",
        ]
        if built is not None:
            lines.append(f"slackquery_artifact_built_timestamp_seconds {built.timestamp():.0f}")
        return "\n".join(lines) + "\n"
