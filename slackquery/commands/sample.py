"""`slackquery sample`: write the deterministic sample workspace export and its judged queries."""

import argparse
from pathlib import Path

from slackquery.commands import add_json_flag, emit, whole_number
from slackquery.sample import generate_sample
from slackquery.sample.generator import MAX_MESSAGES, MIN_MESSAGES
from slackquery.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sample` subcommand."""
    parser = subparsers.add_parser(
        "sample",
        help="generate a deterministic sample Slack export ZIP with planted facts",
        description="Write a standard Slack export ZIP ('all conversations' flavour) of a "
        "fictional team: public and private channels, DMs, a group DM, threads, bots, "
        "edits, files and system messages, with planted facts. A judged query file in the "
        "Beacon YAML format is written next to it as <zip stem>.queries.yaml. The same "
        "--seed and --messages always give a byte-identical ZIP.",
    )
    parser.add_argument(
        "--messages",
        type=whole_number(MIN_MESSAGES, MAX_MESSAGES),
        required=True,
        metavar="N",
        help=f"exact number of messages in the export ({MIN_MESSAGES:,} to {MAX_MESSAGES:,}; "
        "the planted facts are always included)",
    )
    parser.add_argument(
        "--out", type=zip_path, required=True, metavar="PATH.zip", help="where to write the ZIP"
    )
    parser.add_argument(
        "--seed",
        type=whole_number(0),
        default=7,
        help="random seed for the background chatter (0 or more; default: 7)",
    )
    parser.add_argument(
        "--judged-set",
        action="store_true",
        help="also plant the large judged question set (about 450 of the --messages are its "
        "planted facts, in place of background chatter; questions in <zip stem>.judged.yaml, "
        "worded apart from the messages; the README's tables use --messages 5000, decisions "
        "were checked at 20000 too: see docs/evaluation.md)",
    )
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def zip_path(value: str) -> Path:
    """An argparse type: a path whose name ends in .zip (the export is a ZIP)."""
    path = Path(value)
    if path.suffix.lower() != ".zip":
        raise argparse.ArgumentTypeError(f"{value!r} does not name a .zip file")
    return path


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Generate the sample and report what was written."""
    summary = generate_sample(
        args.out, messages=args.messages, seed=args.seed, judged_set=args.judged_set
    )
    kinds = summary["conversations"]
    text = "\n".join(
        [
            f"wrote {summary['path']} ({summary['zip_bytes']:,} bytes)",
            f"  messages   {summary['messages']:,} in {summary['day_files']:,} day files, "
            f"{summary['first_date']} to {summary['last_date']}",
            f"  threads    {summary['threads']:,} with {summary['replies']:,} replies "
            f"({summary['broadcasts']:,} broadcast)",
            f"  conversations  {kinds['public']} public, {kinds['private']} private, "
            f"{kinds['dm']} DMs, {kinds['group_dm']} group DM(s); {summary['users']} users",
            f"  queries    {summary['queries']} judged queries about "
            f"{summary['planted_facts']} planted facts in {summary['queries_path']}",
        ]
    )
    if "judged_path" in summary:
        text += (
            f"\n  judged set {summary['judged_answerable']} answerable + "
            f"{summary['judged_unanswerable']} unanswerable questions about "
            f"{summary['judged_facts']} facts in {summary['judged_path']}"
        )
    emit(args, summary, text)
    return 0
