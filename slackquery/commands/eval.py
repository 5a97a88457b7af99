"""`slackquery eval`: measure lexical, semantic and hybrid retrieval on judged queries."""

import argparse
import json
import sys
from pathlib import Path

from serving.arms import arm_names
from slackquery.errors import SlackqueryError
from slackquery.evaluation import MODES
from slackquery.evaluation.grid import DEFAULT_POINT, FIXED_AXES, STANDARD_GRID, parse_grid
from slackquery.evaluation.queries import load_queries, select_split
from slackquery.evaluation.report import (
    Evaluation,
    grid_table,
    modes_table,
    scores_table,
    to_json,
    write_json,
    write_report,
)
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `eval` subcommand."""
    parser = subparsers.add_parser(
        "eval",
        help="measure retrieval quality on a judged query file (Recall@k, MRR, nDCG, latency)",
        description="Run judged queries (Beacon YAML: evidence groups, graded relevance, "
        "filters) through the production search engine in each mode and report Recall@5/10/20, "
        "group recall, full coverage, MRR@20, nDCG@10 and latency, per mode and split. "
        "With --corpus the corpus is imported, projected, embedded, built and published into "
        "its own home under SLACKQUERY_HOME/eval/ first (embeddings persist there, so a "
        "second run embeds nothing); without it, the published artifact of SLACKQUERY_HOME "
        "is evaluated. See docs/evaluation.md.",
    )
    parser.add_argument("queries", type=Path, metavar="QUERIES.yaml", help="judged query file")
    parser.add_argument(
        "--corpus",
        type=Path,
        metavar="PATH",
        help="corpus to build and evaluate (Beacon .jsonl, or a Slack export ZIP/folder)",
    )
    parser.add_argument(
        "--split",
        choices=("dev", "test", "all"),
        default="all",
        help="which queries to run (default: all)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        metavar="LIST",
        help="comma-separated retrieval modes (default: lexical,semantic,hybrid)",
    )
    parser.add_argument(
        "--grid",
        metavar="SPEC",
        help="hybrid fusion grid: inline `rrf_k=10,60;arm.context=on,off` (each axis "
        "varied alone from the default; prefix `product:` for all combinations), a YAML "
        f"file, or `standard` for the built-in sweep. Axes: {', '.join(FIXED_AXES)}; and for "
        f"each arm ({', '.join(arm_names())}): arm.ARM=on|off, weight.ARM=W and "
        f"weight.ROUTE.ARM=W (routes: exact, conceptual, mixed). standard = {STANDARD_GRID}",
    )
    parser.add_argument(
        "--json",
        metavar="OUT",
        help="write the metrics as JSON to OUT (`-` prints them on stdout instead of tables)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="OUT.md",
        help="write the Markdown report here, with OUT.png (plot) and OUT.jsonl (per-query "
        "rows) beside it (default: SLACKQUERY_HOME/eval/reports/<QUERIES stem>.md)",
    )
    parser.add_argument(
        "--answers",
        action="store_true",
        help="evaluate the answer path instead (answer rate, abstention, citation validity "
        "and precision, part coverage, latency; see slackquery/evaluation/answers.py)",
    )
    parser.set_defaults(handler=run)


def parse_modes(text: str) -> list[str]:
    """The `--modes` list, validated and without repeats."""
    modes = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [mode for mode in modes if mode not in MODES]
    if not modes or unknown:
        raise SlackqueryError(
            f"--modes: expected a comma-separated subset of {', '.join(MODES)}, got {text!r}"
        )
    return modes


def summary_text(evaluation: Evaluation) -> str:
    """The tables printed on the terminal."""
    parts = [modes_table(evaluation), "", scores_table(evaluation)]
    if evaluation.grid_groups():
        parts += ["", grid_table(evaluation)]
    parts += [f"warning: {warning}" for warning in evaluation.warnings]
    return "\n".join(parts)


def default_report_path(settings: Settings, queries: Path) -> Path:
    """Where the report goes without `--report`: one per query file, under the home."""
    return settings.home / "eval" / "reports" / f"{queries.stem}.md"


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Validate every input, run the evaluation, then print and write its outputs."""
    # The runner pulls in the whole pipeline (dbt, Prefect, the embedder); importing it
    # here keeps every other subcommand's start-up free of that cost.
    from slackquery.evaluation.answers import run_answer_eval
    from slackquery.evaluation.runner import evaluate

    queries = select_split(load_queries(args.queries), args.split)
    modes = parse_modes(args.modes)
    grid = parse_grid(args.grid) if args.grid else [DEFAULT_POINT]
    if args.corpus is not None and not args.corpus.exists():
        raise SlackqueryError(f"{args.corpus}: corpus not found")

    def progress(message: str) -> None:
        print(f"eval: {message}", file=sys.stderr, flush=True)

    if args.answers:
        return run_answer_eval(args, settings, queries, progress)
    evaluation = evaluate(
        settings,
        queries,
        queries_file=str(args.queries),
        split=args.split,
        modes=modes,
        grid=grid,
        corpus=args.corpus,
        progress=progress,
    )
    report = args.report if args.report is not None else default_report_path(settings, args.queries)
    written = write_report(evaluation, report)
    progress("wrote " + ", ".join(str(path) for path in written.values()))
    if args.json == "-":
        json.dump(to_json(evaluation), sys.stdout, indent=2, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        if args.json:
            write_json(evaluation, Path(args.json))
            progress(f"wrote {args.json}")
        print(summary_text(evaluation))
    return 0
