"""`slackquery eval`: measure lexical, semantic and hybrid retrieval on judged queries."""

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.arms import arm_names
from slackquery.errors import SlackqueryError
from slackquery.evaluation import MODES
from slackquery.evaluation.compare import (
    Comparison,
    Side,
    compare_sides,
    comparison_table,
    decide,
    decisions_table,
    moved_queries_table,
    parse_side,
    protocol,
    verdict_text,
)
from slackquery.evaluation.grid import (
    DEFAULT_POINT,
    FIXED_AXES,
    STANDARD_GRID,
    GridPoint,
    parse_grid,
)
from slackquery.evaluation.queries import (
    JudgedQuery,
    load_queries,
    select_split,
    without_filters,
)
from slackquery.evaluation.report import (
    Evaluation,
    grid_table,
    modes_table,
    scores_table,
    to_json,
    write_json,
    write_report,
)
from slackquery.folders import make_folder
from slackquery.settings import Settings

DEFAULT_MODES = ",".join(MODES)
# The built-in sweep as help shows it: a space after each `;` lets argparse wrap the line
# between axes, never inside a value (`candidate_window=30,50,10` / `0,200`).
STANDARD_AXES = "; ".join(STANDARD_GRID.split(";"))

if TYPE_CHECKING:  # the answer path imports the serving engine; only `--answers` needs it
    from slackquery.evaluation.answer_compare import AnswerComparison


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
    parser.add_argument(
        "queries",
        type=Path,
        nargs="*",
        metavar="QUERIES.yaml",
        help="judged query files; several are several query sets, compared per set and pooled",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        action="append",
        metavar="PATH",
        help="corpus to build and evaluate (Beacon .jsonl, or a Slack export ZIP/folder): once "
        "for all query files, or once per query file in the same order",
    )
    parser.add_argument(
        "--split",
        choices=("dev", "test", "all"),
        default="all",
        help="which queries to run (default: all)",
    )
    parser.add_argument(
        "--modes",
        default=DEFAULT_MODES,
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
        f"weight.ROUTE.ARM=W (routes: exact, conceptual, mixed). standard = {STANDARD_AXES}",
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
        "--compare",
        nargs=2,
        action="append",
        metavar=("A", "B"),
        help="paired comparison of B against A (repeatable): per-query deltas and bootstrap "
        "95%% intervals "
        "of the difference in R@10, MRR@20 and nDCG@10, per query set and pooled. A side is "
        "[ROWS.jsonl#][MODE][:CONFIG]: a mode, a hybrid configuration in the grid's syntax "
        "(`rrf_k=60;arm.context=off`, `default`), or rows saved by an earlier --rows run. "
        "With --answers, A and B are rows files of earlier --answers --rows runs, and the "
        "intervals are of strict and lenient citation precision, part coverage, answer rate "
        "and correct abstention",
    )
    parser.add_argument(
        "--baseline",
        metavar="SIDE",
        help="with --grid: compare every grid configuration against this side",
    )
    parser.add_argument(
        "--rows",
        type=Path,
        metavar="OUT.jsonl",
        help="write every query set's per-query rows (with --answers, the answer rows) to "
        "one file, each row with how the run was made (filters sent, the artifact's "
        "generation and build): input for a later --compare",
    )
    parser.add_argument(
        "--compare-report",
        type=Path,
        metavar="OUT.md",
        help="write the comparisons, with every query that moved, as Markdown",
    )
    parser.add_argument(
        "--no-filters",
        action="store_true",
        help="send each query's text alone, as `slackquery search QUESTION` does (the "
        "held-out benchmark's protocol); by default a query file's filters (channel, "
        "author, dates) become request filters",
    )
    parser.add_argument(
        "--answers",
        action="store_true",
        help="evaluate the answer path instead (answer rate, abstention, citation validity "
        "and precision, part coverage, latency; each query file a set; see "
        "docs/evaluation.md, Answer path)",
    )
    parser.set_defaults(handler=run, usage_error=parser.error)


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
    """The tables printed on the terminal (warnings went to stderr before the runs)."""
    parts = [modes_table(evaluation), "", scores_table(evaluation)]
    if evaluation.grid_groups():
        parts += ["", grid_table(evaluation)]
    return "\n".join(parts)


def default_report_path(settings: Settings, queries: Path) -> Path:
    """Where the report goes without `--report`: one per query file, under the home."""
    return settings.home / "eval" / "reports" / f"{queries.stem}.md"


def query_sets(args: argparse.Namespace) -> list[tuple]:
    """(name, query file, corpus) per query set; one corpus serves every file."""
    queries, corpora = args.queries, list(args.corpus or [])
    if corpora and not queries:
        args.usage_error("--corpus is built for a judged query file: give one")
    if len(corpora) not in (0, 1, len(queries)):
        args.usage_error(
            f"--corpus: give one corpus, or one per query file ({len(queries)}), not {len(corpora)}"
        )
    if len(corpora) == 1:
        corpora *= len(queries)
    for corpus in corpora:
        if not corpus.exists():
            raise SlackqueryError(f"{corpus}: corpus not found")
    refuse_repeated_files(queries)
    names: list[str] = []
    for path in queries:
        name = path.stem
        names.append(name if name not in names else f"{name}-{len(names) + 1}")
    return [
        (name, path, corpora[index] if corpora else None)
        for index, (name, path) in enumerate(zip(names, queries, strict=True))
    ]


def refuse_repeated_files(queries: Sequence[Path]) -> None:
    """Refuse a query file given twice (by path, or a copy of it): as two sets it would
    count every query twice in the pooled figures. A missing file is left to the loader."""
    seen: dict[Path | bytes, Path] = {}
    for path in queries:
        keys = [path.resolve(), path.read_bytes()] if path.is_file() else [path.resolve()]
        earlier = next((seen[key] for key in keys if key in seen), None)
        if earlier is not None:
            raise SlackqueryError(
                f"{path}: the same queries as {earlier}; as two sets every query would count "
                "twice, so give each query file once"
            )
        seen.update(dict.fromkeys(keys, path))


def require_input(
    args: argparse.Namespace, sets: Sequence[tuple], pairs: Sequence[Any] | None
) -> None:
    """Refuse a run with neither a query set to evaluate nor a pair to compare: it would
    do nothing and exit 0, which reads as success. QUERIES.yaml is optional only beside
    --compare, which argparse cannot say, so this is its missing-argument usage error."""
    if not sets and not pairs:
        args.usage_error("the following arguments are required: QUERIES.yaml (or --compare)")


def usable_grid(args: argparse.Namespace) -> list[GridPoint]:
    """The `--grid` configurations; a mistake in an inline spec is a usage error, one in a
    grid file the file's (a plain error)."""
    if args.grid is None:
        return [DEFAULT_POINT]
    try:
        return parse_grid(args.grid)
    except SlackqueryError as error:
        if args.grid.strip().endswith((".yaml", ".yml")):
            raise
        args.usage_error(str(error))


def comparisons_wanted(args: argparse.Namespace, grid: list[GridPoint]) -> list[tuple[Side, Side]]:
    """(A, B) pairs: the --compare pair, or every grid point against --baseline."""
    if args.baseline and not args.grid:
        args.usage_error("--baseline compares a grid: give --grid as well")
    if args.baseline and args.compare:
        args.usage_error("use --compare or --grid with --baseline, not both")
    if args.compare:
        return [(parse_side(a), parse_side(b)) for a, b in args.compare]
    if args.baseline:
        baseline = parse_side(args.baseline)
        return [
            (baseline, Side(f"hybrid:{point.name}", "hybrid", point))
            for point in grid
            if (baseline.mode, baseline.point.name) != ("hybrid", point.name)
        ]
    return []


def report_path(
    args: argparse.Namespace, settings: Settings, name: str, path: Path, several: bool
) -> Path:
    """Where one query set's report goes: --report (suffixed per set when several)."""
    if args.report is None:
        return default_report_path(settings, path)
    if several:
        return args.report.with_name(f"{args.report.stem}-{name}{args.report.suffix}")
    return args.report


def comparison_text(comparison: Comparison, *, moved: bool) -> str:
    """A comparison's interval table and decision, and optionally every query that moved."""
    parts = [
        f"## {comparison.b} against {comparison.a} (B - A)",
        "",
        *(f"Note: {note}.\n" for note in comparison.notes),
        comparison_table(comparison),
        "",
        verdict_text(decide(comparison)),
    ]
    if moved:
        parts += ["", moved_queries_table(comparison)]
    return "\n".join(parts)


def judged_queries(args: argparse.Namespace, path: Path) -> list[JudgedQuery]:
    """One query file's queries: the chosen split, without filters if asked."""
    queries = select_split(load_queries(path), args.split)
    return without_filters(queries) if args.no_filters else queries


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Validate every input, run the evaluation, then print and write its outputs."""
    # The runner pulls in the whole pipeline (dbt, Prefect, the embedder); importing it
    # here keeps every other subcommand's start-up free of that cost.
    from slackquery.evaluation.runner import evaluate

    def progress(message: str) -> None:
        print(f"eval: {message}", file=sys.stderr, flush=True)

    sets = query_sets(args)
    if args.rows and not sets:
        args.usage_error("--rows writes the rows of a run: give a judged query file")
    if args.compare_report and not (args.compare or args.baseline):
        args.usage_error("--compare-report writes comparisons: give --compare")
    if args.answers:
        return run_answers(args, settings, answer_sets(args, sets), progress)
    try:
        modes = parse_modes(args.modes)
    except SlackqueryError as error:
        args.usage_error(str(error))
    grid = usable_grid(args)
    pairs = comparisons_wanted(args, grid)
    for side in (side for pair in pairs for side in pair if side.rows_file is None):
        if side.mode not in modes:
            modes.append(side.mode)
        if side.mode == "hybrid" and side.point.name not in {p.name for p in grid}:
            grid.append(side.point)
    require_input(args, sets, pairs)
    if not sets and not all(side.rows_file for pair in pairs for side in pair):
        args.usage_error(
            "the following arguments are required: QUERIES.yaml (to run a --compare or "
            "--baseline side that is not a rows file)"
        )
    several = len(sets) > 1
    evaluations: dict[str, Evaluation] = {}
    for (name, path, corpus), prepare in zip(sets, first_uses(sets), strict=True):
        queries = judged_queries(args, path)
        evaluation = evaluate(
            settings,
            queries,
            queries_file=str(path),
            split=args.split,
            modes=[mode for mode in MODES if mode in modes],
            grid=grid,
            corpus=corpus,
            prepare=prepare,
            progress=progress,
        )
        evaluation.filters_sent = not args.no_filters
        written = write_report(evaluation, report_path(args, settings, name, path, several))
        progress("wrote " + ", ".join(str(p) for p in written.values()))
        evaluations[name] = evaluation
    runs = {name: tagged_rows(name, evaluation) for name, evaluation in evaluations.items()}
    if args.rows:
        write_rows(args.rows, [row for rows in runs.values() for row in rows], progress)
    comparisons = [compare_sides(a, b, runs) for a, b in pairs]
    if args.compare_report:
        texts = [
            decisions_table(comparisons),
            *(comparison_text(c, moved=True) for c in comparisons),
        ]
        write_compare_report(args.compare_report, texts, progress)
    if args.json == "-":
        json.dump(
            json_document(evaluations, comparisons),
            sys.stdout,
            indent=2,
            default=str,
            ensure_ascii=False,
        )
        sys.stdout.write("\n")
        return 0
    if args.json:
        if several or comparisons:
            Path(args.json).write_text(
                json.dumps(
                    json_document(evaluations, comparisons),
                    indent=2,
                    default=str,
                    ensure_ascii=False,
                )
                + "\n",
                encoding="utf-8",
            )
        else:
            write_json(next(iter(evaluations.values())), Path(args.json))
        progress(f"wrote {args.json}")
    for name, evaluation in evaluations.items():
        if several:
            print(f"# {name}\n")
        print(summary_text(evaluation) + ("\n" if several else ""))
    for comparison in comparisons:
        print("\n" + comparison_text(comparison, moved=False))
    if len(comparisons) > 1:
        print("\n" + decisions_table(comparisons))
    return 0


def first_uses(sets: Sequence[tuple]) -> list[bool]:
    """Per query set (name, queries, corpus), whether its corpus is built and published
    here: by the first set that names it; the sets after it use that build."""
    seen: set[Path] = set()
    firsts = []
    for *_, corpus in sets:
        firsts.append(corpus is not None and corpus.resolve() not in seen)
        if corpus is not None:
            seen.add(corpus.resolve())
    return firsts


def write_rows(path: Path, rows: Sequence[Mapping], progress: Callable[[str], None]) -> None:
    """Per-query rows, one JSON object a line: the input of a later `--compare`."""
    make_folder(path.parent)
    path.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )
    progress(f"wrote {path}")


def write_compare_report(path: Path, texts: Sequence[str], progress: Callable[[str], None]) -> None:
    """The comparisons' Markdown, one section after another."""
    make_folder(path.parent)
    path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    progress(f"wrote {path}")


def tagged_rows(name: str, evaluation: Evaluation) -> list[dict]:
    """Every per-query row of one query set, tagged with the set, mode and configuration,
    and with how the run was made (`compare.protocol`)."""
    made = protocol(evaluation.filters_sent, evaluation.artifact)
    return [
        {"query_set": name, "mode": group.mode, "config": group.config, **made, **row}
        for group in evaluation.groups
        for row in group.rows
    ]


def json_document(evaluations: Mapping[str, Evaluation], comparisons: Sequence[Comparison]) -> dict:
    """One query set without comparisons keeps `to_json`'s layout; otherwise sets and
    comparisons side by side."""
    if len(evaluations) == 1 and not comparisons:
        return to_json(next(iter(evaluations.values())))
    return {
        "sets": {name: to_json(evaluation) for name, evaluation in evaluations.items()},
        "comparisons": [
            {
                "a": comparison.a,
                "b": comparison.b,
                "keep_b": decide(comparison).keep,
                "reasons": list(decide(comparison).reasons),
                "notes": list(comparison.notes),
                "intervals": {
                    name: {metric: vars(interval) for metric, interval in by_metric.items()}
                    for name, by_metric in comparison.intervals.items()
                },
            }
            for comparison in comparisons
        ],
    }


def answer_sets(
    args: argparse.Namespace, sets: Sequence[tuple]
) -> list[tuple[str, list[JudgedQuery], Path | None]]:
    """The query sets `--answers` runs (name, queries, corpus), once its options are checked:
    it answers in hybrid mode with the default configuration and prints its own tables."""
    given = {
        "--grid": args.grid is not None,
        "--baseline": args.baseline,
        "--report": args.report,
        "--modes": args.modes != DEFAULT_MODES,
    }
    refused = [option for option, value in given.items() if value]
    if refused:
        args.usage_error(
            "--answers answers in hybrid mode with the default configuration and prints its "
            f"own tables: {', '.join(refused)} does not apply"
        )
    require_input(args, sets, args.compare)
    return [(name, judged_queries(args, path), corpus) for name, path, corpus in sets]


def run_answers(
    args: argparse.Namespace,
    settings: Settings,
    sets: Sequence[tuple[str, Sequence[JudgedQuery], Path | None]],
    progress: Callable[[str], None],
) -> int:
    """`slackquery eval --answers`: answer every query set (name, queries, corpus), print
    the answer-path tables, and compare saved runs (`--compare A.jsonl B.jsonl`, rows that
    `--answers --rows` wrote)."""
    from slackquery.evaluation.answer_compare import answer_comparison_text, compare_saved
    from slackquery.evaluation.answers import answers_table, evaluate_answers

    comparisons = [compare_saved(Path(a), Path(b)) for a, b in args.compare or []]
    results = {
        name: evaluate_answers(settings, queries, corpus=corpus, prepare=prepare, progress=progress)
        for (name, queries, corpus), prepare in zip(sets, first_uses(sets), strict=True)
    }
    if args.rows:
        rows = [
            {"query_set": name, **protocol(not args.no_filters, result["artifact"]), **row}
            for name, result in results.items()
            for row in result["rows"]
        ]
        write_rows(args.rows, rows, progress)
    if args.compare_report:
        texts = [answer_comparison_text(c, changed=True) for c in comparisons]
        write_compare_report(args.compare_report, texts, progress)
    if args.json:
        document = answers_json_document(results, comparisons)
        text = json.dumps(document, indent=2, default=str, ensure_ascii=False) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
            return 0
        Path(args.json).write_text(text, encoding="utf-8")
        progress(f"wrote {args.json}")
    for name, result in results.items():
        print((f"# {name}\n\n" if len(results) > 1 else "") + answers_table(result) + "\n")
    for comparison in comparisons:
        print(answer_comparison_text(comparison, changed=False) + "\n")
    return 0


def answers_json_document(
    results: dict[str, dict[str, Any]], comparisons: Sequence["AnswerComparison"]
) -> dict[str, Any]:
    """One query set without comparisons keeps its result's layout; otherwise sets and
    comparisons side by side (as retrieval's `--json`)."""
    from slackquery.evaluation.answer_compare import decide_answers

    if len(results) == 1 and not comparisons:
        return next(iter(results.values()))
    decisions = [decide_answers(comparison) for comparison in comparisons]
    return {
        "sets": results,
        "comparisons": [
            {
                "a": comparison.a,
                "b": comparison.b,
                "keep_b": decision.keep,
                "reasons": list(decision.reasons),
                "notes": list(comparison.notes),
                "intervals": {
                    name: {figure: vars(interval) for figure, interval in by_figure.items()}
                    for name, by_figure in comparison.intervals.items()
                },
                "changed": [[name, a["id"]] for name, a, _ in comparison.changed],
            }
            for comparison, decision in zip(comparisons, decisions, strict=True)
        ],
    }
