"""The evaluation's outputs: a JSON document, a Markdown report, a plot and per-query rows.

Everything here works from `Evaluation` (per-query rows grouped by mode and fusion
configuration), so the writers can be tested with synthetic rankings and never touch a
search engine. Per-query rows go out as JSON lines beside the report so a regression in a
summary figure can be traced to the queries that moved.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slackquery.evaluation.metrics import MRR_K, NDCG_K, RECALL_KS, summarize
from slackquery.folders import make_folder

DEFAULT_CONFIG = "default"


@dataclass
class RunGroup:
    """Per-query rows of one retrieval mode under one fusion configuration."""

    mode: str
    config: str
    overrides: Mapping[str, Any]
    rows: list[dict[str, Any]]

    @property
    def is_default(self) -> bool:
        """True when the fusion configuration is the shipped default."""
        return self.config == DEFAULT_CONFIG

    @property
    def label(self) -> str:
        """Short label: the mode, plus the configuration when it is not the default."""
        return self.mode if self.is_default else f"{self.mode} {self.config}"

    def splits(self) -> list[str]:
        """The splits present in the rows, in a stable order, then `all` when several."""
        present = sorted({row["split"] for row in self.rows})
        return [*present, "all"] if len(present) > 1 else present

    def summary(self, split: str) -> dict[str, Any]:
        """Aggregated metrics of one split (`all` = every row)."""
        rows = self.rows if split == "all" else [r for r in self.rows if r["split"] == split]
        return summarize(rows)


@dataclass
class Evaluation:
    """One evaluation run: where the queries and corpus came from, and every run group."""

    queries_file: str
    split: str
    groups: list[RunGroup]
    corpus: str | None = None
    artifact: Mapping[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # False under `--no-filters`: every query was sent as its text alone.
    filters_sent: bool = True
    started_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())

    def default_groups(self) -> list[RunGroup]:
        """Each mode under the default fusion configuration."""
        return [group for group in self.groups if group.is_default]

    def grid_groups(self) -> list[RunGroup]:
        """Hybrid runs, one per configuration, when a grid was evaluated."""
        hybrid = [group for group in self.groups if group.mode == "hybrid"]
        return hybrid if len(hybrid) > 1 else []


def to_json(evaluation: Evaluation) -> dict[str, Any]:
    """The metrics as one JSON-ready document (no per-query rows: those go to JSON lines)."""
    return {
        "queries_file": evaluation.queries_file,
        "corpus": evaluation.corpus,
        "split": evaluation.split,
        "filters_sent": evaluation.filters_sent,
        "artifact": dict(evaluation.artifact),
        "started_at": evaluation.started_at,
        "warnings": list(evaluation.warnings),
        "results": [
            {
                "mode": group.mode,
                "config": group.config,
                "is_default": group.is_default,
                "overrides": {key: _jsonable(value) for key, value in group.overrides.items()},
                "split": split,
                "metrics": group.summary(split),
            }
            for group in evaluation.groups
            for split in group.splits()
        ],
    }


def write_json(evaluation: Evaluation, path: Path) -> None:
    """Write `to_json` to `path`."""
    _write_text(path, json.dumps(to_json(evaluation), indent=2, ensure_ascii=False) + "\n")


def write_query_rows(evaluation: Evaluation, path: Path) -> None:
    """One JSON line per query per mode per configuration."""
    lines = [
        json.dumps({"mode": group.mode, "config": group.config, **row}, ensure_ascii=False)
        for group in evaluation.groups
        for row in group.rows
    ]
    _write_text(path, "\n".join(lines) + "\n")


def write_report(evaluation: Evaluation, path: Path) -> dict[str, Path]:
    """Write the Markdown report with its plot (`<stem>.png`) and rows (`<stem>.jsonl`)."""
    plot_path = path.with_suffix(".png")
    rows_path = path.with_suffix(".jsonl")
    write_plot(evaluation, plot_path)
    write_query_rows(evaluation, rows_path)
    _write_text(
        path, render_markdown(evaluation, plot_name=plot_path.name, rows_name=rows_path.name)
    )
    return {"report": path, "plot": plot_path, "rows": rows_path}


def render_markdown(
    evaluation: Evaluation, *, plot_name: str | None = None, rows_name: str | None = None
) -> str:
    """The whole report as Markdown."""
    artifact = evaluation.artifact
    lines = [
        "# Relevance evaluation",
        "",
        f"- Queries: `{evaluation.queries_file}` (split: {evaluation.split})",
        "- Filters: "
        + ("as the query file gives them" if evaluation.filters_sent else "none (`--no-filters`)"),
    ]
    if evaluation.corpus:
        lines.append(f"- Corpus: `{evaluation.corpus}`")
    if artifact:
        lines.append(
            f"- Artifact: build `{artifact.get('build_id')}`, "
            f"generation `{artifact.get('generation_id')}`, "
            f"{artifact.get('message_count')} messages"
        )
    lines.append(f"- Run at: {evaluation.started_at}")
    lines += ["", "## Modes (default fusion configuration)", "", modes_table(evaluation)]
    lines += ["", "## Fused scores: answerable vs unanswerable", "", scores_table(evaluation)]
    lines += [
        "",
        "Top-1 and mean top-5 fused scores, and the best cosine similarity among the "
        "results (min / median / max). An abstention threshold needs unanswerable scores "
        "below answerable ones; overlapping ranges mean that score alone cannot tell them "
        "apart. Fused scores are rank-based, so in single-arm modes they are nearly constant.",
    ]
    if evaluation.grid_groups():
        lines += ["", "## Fusion grid (hybrid)", "", grid_table(evaluation)]
    if plot_name:
        lines += ["", f"![Recall@10 and MRR@20 per configuration]({plot_name})"]
    lines += ["", "## Per query (default configuration)", "", per_query_table(evaluation)]
    if rows_name:
        lines += ["", f"Raw per-query rows, every mode and configuration: `{rows_name}`."]
    if evaluation.warnings:
        lines += ["", "## Warnings", "", *(f"- {warning}" for warning in evaluation.warnings)]
    return "\n".join(lines) + "\n"


def modes_table(evaluation: Evaluation) -> str:
    """Mode x split table of every relevance metric and latency."""
    headers = [
        "Mode",
        "Split",
        "Queries",
        *(f"R@{k}" for k in RECALL_KS),
        "Groups micro@10",
        "Full cov@10",
        f"MRR@{MRR_K}",
        f"nDCG@{NDCG_K}",
        "p50 ms",
        "p95 ms",
        "p95 ms +embed",
        "Errors",
    ]
    rows = []
    for group in evaluation.default_groups():
        for split in group.splits():
            summary = group.summary(split)
            rows.append(
                [
                    group.mode,
                    split,
                    f"{summary['answerable']}+{summary['unanswerable']}",
                    *(_num(summary[f"recall@{k}"]) for k in RECALL_KS),
                    _num(summary["group_recall_micro@10"]),
                    _num(summary["full_coverage@10"]),
                    _num(summary[f"mrr@{MRR_K}"]),
                    _num(summary[f"ndcg@{NDCG_K}"]),
                    _num(summary["latency_p50_ms"], 1),
                    _num(summary["latency_p95_ms"], 1),
                    _num(summary.get("latency_with_embedding_p95_ms"), 1),
                    str(summary["errors"]),
                ]
            )
    return markdown_table(headers, rows)


def scores_table(evaluation: Evaluation) -> str:
    """Fused-score ranges per mode, answerable against unanswerable queries."""
    headers = [
        "Mode",
        "Queries",
        "Top-1 fused (min / median / max)",
        "Mean top-5 fused (min / median / max)",
        "Best cosine (min / median / max)",
    ]
    rows = []
    for group in evaluation.default_groups():
        summary = group.summary("all")
        for kind in ("answerable", "unanswerable"):
            dist = summary[f"scores_{kind}"]
            if dist is None:
                continue
            rows.append(
                [
                    group.mode,
                    f"{kind} ({dist['queries']})",
                    " / ".join(_num(dist[f"top1_{s}"], 4) for s in ("min", "median", "max")),
                    " / ".join(_num(dist[f"mean_top5_{s}"], 4) for s in ("min", "median", "max")),
                    " / ".join(
                        _num(dist.get(f"top_cosine_{s}"), 3) for s in ("min", "median", "max")
                    ),
                ]
            )
    return markdown_table(headers, rows)


def grid_table(evaluation: Evaluation) -> str:
    """One row per hybrid configuration and split; the default is marked."""
    headers = [
        "Configuration",
        "Split",
        "R@5",
        "R@10",
        "R@20",
        f"MRR@{MRR_K}",
        f"nDCG@{NDCG_K}",
        "p95 ms",
    ]
    rows = []
    for group in evaluation.grid_groups():
        name = f"**{group.config}**" if group.is_default else group.config
        for split in group.splits():
            summary = group.summary(split)
            rows.append(
                [
                    name,
                    split,
                    _num(summary["recall@5"]),
                    _num(summary["recall@10"]),
                    _num(summary["recall@20"]),
                    _num(summary[f"mrr@{MRR_K}"]),
                    _num(summary[f"ndcg@{NDCG_K}"]),
                    _num(summary["latency_p95_ms"], 1),
                ]
            )
    return markdown_table(headers, rows)


def per_query_table(evaluation: Evaluation) -> str:
    """Recall@10 and reciprocal rank of every query under each mode's default config."""
    groups = evaluation.default_groups()
    if not groups:
        return "(no runs)"
    headers = ["Query", "Split", "Type", *(f"{g.mode} R@10 / RR" for g in groups)]
    by_mode = [{row["query_id"]: row for row in group.rows} for group in groups]
    rows = []
    for row in groups[0].rows:
        cells = [row["query_id"], row["split"], row.get("type") or ""]
        for mode_rows in by_mode:
            other = mode_rows.get(row["query_id"])
            if other is None:
                cells.append("")
            elif other.get("error"):
                cells.append("error")
            elif other["answerable"]:
                cells.append(f"{other['recall@10']:.2f} / {other[f'rr@{MRR_K}']:.2f}")
            else:
                cells.append(f"top1 {_num(other['top1_score'], 4)}")
        rows.append(cells)
    return markdown_table(headers, rows)


def write_plot(evaluation: Evaluation, path: Path, *, split: str = "all") -> None:
    """Bar chart of Recall@10 and MRR@20 per mode/configuration; the default is marked.

    With a grid, the bars are the hybrid configurations; without one, the modes.
    """
    groups = evaluation.grid_groups() or evaluation.default_groups()
    if groups and split not in groups[0].splits():
        split = groups[0].splits()[0]
    labels, recall, mrr, marked = [], [], [], []
    for group in groups:
        summary = group.summary(split)
        labels.append(group.config if evaluation.grid_groups() else group.mode)
        recall.append(summary["recall@10"] or 0.0)
        mrr.append(summary[f"mrr@{MRR_K}"] or 0.0)
        marked.append(group.is_default and group.mode == "hybrid")
    # matplotlib is imported only when a plot is drawn: it costs every CLI start ~0.3 s.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(max(6.0, 0.55 * len(labels) + 2), 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = list(range(len(labels)))
    width = 0.4
    axes.bar([p - width / 2 for p in positions], recall, width, label="Recall@10")
    axes.bar([p + width / 2 for p in positions], mrr, width, label=f"MRR@{MRR_K}")
    for position, is_marked in zip(positions, marked, strict=True):
        if is_marked:
            axes.axvspan(position - 0.5, position + 0.5, color="gold", alpha=0.25, zorder=0)
    if evaluation.grid_groups():
        # Single-arm baselines as reference lines: the grid exists to beat them.
        for group, style in zip(
            [g for g in evaluation.default_groups() if g.mode != "hybrid"],
            (":", "--"),
            strict=False,
        ):
            summary = group.summary(split if split in group.splits() else group.splits()[0])
            for metric, colour in (("recall@10", "C0"), (f"mrr@{MRR_K}", "C1")):
                if summary[metric] is not None:
                    axes.axhline(
                        summary[metric],
                        color=colour,
                        linestyle=style,
                        linewidth=1,
                        label=f"{group.mode} {metric}",
                    )
    axes.set_xticks(positions)
    axes.set_xticklabels(
        [
            f"{label} (default)" if m and label != DEFAULT_CONFIG else label
            for label, m in zip(labels, marked, strict=True)
        ],
        rotation=45 if len(labels) > 4 else 0,
        ha="right" if len(labels) > 4 else "center",
        fontsize=8,
    )
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("score (answerable queries)")
    axes.set_title(f"Recall@10 and MRR@{MRR_K} ({split} split; default shaded)")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    make_folder(path.parent)
    figure.savefig(path, dpi=110)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (also readable as plain text in a terminal)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _write_text(path: Path, text: str) -> None:
    make_folder(path.parent)
    path.write_text(text, encoding="utf-8")
