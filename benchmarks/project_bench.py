"""Benchmark of the dbt projection: full run, then an incremental run after 1% of messages change.

The canonical store comes from one of three places: N synthetic messages filled straight
from SQL (the default: channels, users, threads, mentions, links, code, bots, deletions,
joins; seconds to make), the sample workspace (`--sample`: `slackquery sample` then
`slackquery import`, so the texts are the generator's real mrkdwn; about a minute per
million messages), or a copy of an existing canonical DB (`--canonical PATH`). The
benchmark projects it with `slackquery project`, changes the text and payload hash of 1%
of the messages, and projects again. Each projection runs in a child process so its peak
memory (RSS of the process tree, sampled every 50 ms) and CPU time are its own; the
per-model times come from dbt's run_results.json. The machine is often shared, so the
load average is reported next to every time. Targets at 1,000,000 messages on the
2-core reference machine: full <= 90 s, incremental <= 15 s.

    python -m benchmarks.project_bench --messages 100000 [--sample | --canonical PATH]
        [--home DIR] [--with-tests] [--json]
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psutil

SCHEMA_SQL = Path(__file__).resolve().parent.parent / "slackquery" / "canonical" / "schema.sql"


def fill_canonical(path: Path, messages: int, *, channels: int = 200, users: int = 2000) -> None:
    """Create a canonical DB at `path` with `messages` synthetic messages."""
    connection = duckdb.connect(str(path))
    try:
        connection.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
        connection.execute("insert into schema_metadata values (2, now())")
        connection.execute(
            "insert into workspaces values ('T0BENCH', 'bench', 'Bench Corp', "
            "'https://bench.slack.com', 'slack_export', 'run-1', now())"
        )
        connection.execute(
            """
            insert into channels (workspace_id, channel_id, name, conversation_type, is_archived,
                is_general, export_folder, payload_hash, latest_run_id, last_changed_at)
            select 'T0BENCH', 'C' || lpad(i::varchar, 8, '0'), 'channel-' || i,
                case i % 10 when 0 then 'private_channel' when 1 then 'im' when 2 then 'mpim'
                    else 'public_channel' end,
                false, i = 0, 'channel-' || i, md5(i::varchar), 'run-1', now()
            from range(?) as t(i)
            """,
            [channels],
        )
        connection.execute(
            """
            insert into users (workspace_id, user_id, username, real_name, display_name,
                is_bot, is_deleted, is_admin, payload_hash, latest_run_id, last_changed_at)
            select 'T0BENCH', 'U' || lpad(i::varchar, 8, '0'), 'user' || i, 'User Number ' || i,
                case when i % 3 = 0 then '' else 'User ' || i end,
                i % 100 = 0, false, false, md5(i::varchar), 'run-1', now()
            from range(?) as t(i)
            """,
            [users],
        )
        # Messages come in groups of 10 per channel and minute: the first of every third
        # group is a thread root and the group's next 5 messages are its replies.
        connection.execute(
            """
            insert into messages
            with numbered as (
                select
                    i,
                    'C' || lpad((i // 10 % ?)::varchar, 8, '0') as channel_id,
                    (1600000000 + i * 7)::varchar || '.' || lpad((i % 1000000)::varchar, 6, '0')
                        as ts,
                    (1600000000 + (i - i % 10) * 7)::varchar || '.'
                        || lpad(((i - i % 10) % 1000000)::varchar, 6, '0') as group_ts,
                    (i // 10) % 3 = 0 and i % 10 <= 5 as in_thread,
                    'U' || lpad((hash(i) % ?)::varchar, 8, '0') as user_id,
                    'U' || lpad((hash(i + 1) % ?)::varchar, 8, '0') as mentioned_id
                from range(?) as t(i)
            )
            select
                'T0BENCH:' || channel_id || ':' || ts,
                'T0BENCH', channel_id, ts,
                split_part(ts, '.', 1)::bigint * 1000000 + split_part(ts, '.', 2)::bigint,
                case when i % 50 = 7 then null else user_id end,
                case when i % 50 = 7 then 'B0DEPLOY' end,
                case when i % 50 = 7 then 'deploybot' end,
                case when i % 50 = 7 then 'bot_message'
                    when i % 97 = 3 then 'channel_join' end,
                case i % 5
                    when 0 then 'hey <@' || mentioned_id || '> error 28P01 on db-' || i
                        || ' see <#' || channel_id || '|channel> *urgent*'
                    when 1 then 'deploy v2.' || (i % 30) || '.1 done: <https://ci.example.com/'
                        || i || '|build ' || i || '> &amp; <!here> :tada:'
                    when 2 then 'run `select * from t where id = ' || i || '` then ```\\nERR-'
                        || (i % 100) || ' &lt;ok&gt;\\n``` _thanks_'
                    when 3 then 'café naïve Привет message number ' || i
                    else 'plain message ' || i || ' about ticket ABC-' || (i % 1000)
                end,
                null,
                case when in_thread then group_ts end,
                in_thread and i % 10 = 0,
                in_thread and i % 10 > 0,
                in_thread and i % 10 = 5,
                case when in_thread and i % 10 = 0 then 5 end,
                i % 40 = 1, null,
                i % 200 = 11, i % 50 = 7,
                case when i % 4 = 0 then '[{"name":"thumbsup","count":1,"users":["U00000001"]}]'
                end::json,
                null,
                'T0BENCH:' || channel_id || ':' || ts,
                '2020-09-13'::date, null,
                md5(i::varchar), 'run-1', 'run-1', now()
            from numbered
            """,
            [channels, users, users, messages],
        )
        connection.execute(
            "update messages set search_text = text, "
            "subtype = case when is_thread_broadcast then 'thread_broadcast' else subtype end"
        )
    finally:
        connection.close()


def _count_messages(path: Path) -> int:
    """Messages in a canonical DB."""
    connection = duckdb.connect(str(path), read_only=True)
    try:
        return connection.execute("select count(*) from messages").fetchone()[0]
    finally:
        connection.close()


def change_messages(path: Path, fraction: float) -> int:
    """Edit `fraction` of the messages (new text, payload hash, change time); return how many."""
    connection = duckdb.connect(str(path))
    try:
        total = connection.execute("select count(*) from messages").fetchone()[0]
        step = max(1, round(1 / fraction))
        connection.execute(
            "update messages set text = text || ' (edited)', search_text = search_text || "
            "' (edited)', is_edited = true, payload_hash = md5(payload_hash || 'edit'), "
            "last_changed_at = now() where hash(message_key) % ? = 0",
            [step],
        )
        changed = connection.execute(
            "select count(*) from messages where is_edited and text like '% (edited)'"
        ).fetchone()[0]
    finally:
        connection.close()
    return min(changed, total)


def run_projection(home: Path, *, full_refresh: bool, with_tests: bool) -> dict:
    """`slackquery project` in a child process; its result plus wall time and peak RSS."""
    command = [sys.executable, "-m", "slackquery.cli", "project", "--json"]
    if full_refresh:
        command.append("--full-refresh")
    if not with_tests:
        command.append("--skip-tests")
    environment = {**os.environ, "SLACKQUERY_HOME": str(home)}
    for name in ("CANONICAL_DB", "STATE_DB", "LOG_DIR", "ARTIFACT_DIR"):
        environment.pop(f"SLACKQUERY_{name}", None)
    load_before = os.getloadavg()[0]
    cpu_before = _children_cpu_s()
    started = time.perf_counter()
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    )
    peak = _watch_peak_rss(child)
    stdout, stderr = child.communicate()
    elapsed = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"projection failed: {stderr.decode('utf-8', 'replace').strip()}")
    result = json.loads(stdout)
    models_s, model_times = _run_results(home / "dbt" / "target" / "run_results.json")
    return {
        "wall_s": round(elapsed, 2),
        "dbt_s": result["elapsed_s"],
        "models_s": models_s,
        "cpu_s": round(_children_cpu_s() - cpu_before, 2),
        "peak_rss_mib": round(peak.value / 2**20, 1),
        "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "model_s": model_times,
        "documents": result["documents"],
    }


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_results(path: Path) -> tuple[float, dict[str, float]]:
    """dbt's own time for the node phase and each model's, from run_results.json."""
    results = json.loads(path.read_text(encoding="utf-8"))
    models = {
        result["unique_id"].rsplit(".", 1)[-1]: round(result["execution_time"], 2)
        for result in results["results"]
        if result["unique_id"].startswith("model.")
    }
    return round(results["elapsed_time"], 2), models


def make_sample_canonical(home: Path, messages: int) -> dict:
    """The sample workspace as a canonical DB in `home`: `slackquery sample` + `import`."""
    environment = {**os.environ, "SLACKQUERY_HOME": str(home)}
    for name in ("CANONICAL_DB", "STATE_DB", "LOG_DIR", "ARTIFACT_DIR"):
        environment.pop(f"SLACKQUERY_{name}", None)
    export = home / "sample-export.zip"
    times = {}
    for step, arguments in (
        ("sample_s", ["sample", "--messages", str(messages), "--out", str(export), "--json"]),
        ("import_s", ["import", str(export), "--json"]),
    ):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "slackquery.cli", *arguments],
            check=True,
            stdout=subprocess.DEVNULL,
            env=environment,
        )
        times[step] = round(time.perf_counter() - started, 2)
    export.unlink()
    return times


class _Peak:
    value = 0


def _watch_peak_rss(child: subprocess.Popen) -> _Peak:
    """Sample the RSS of `child` and its descendants every 50 ms in a thread until it exits."""
    peak = _Peak()
    process = psutil.Process(child.pid)

    def sample() -> None:
        while child.poll() is None:
            try:
                tree = [process, *process.children(recursive=True)]
                peak.value = max(peak.value, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    child.wait()
    watcher.join()
    return peak


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages to make")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--sample",
        action="store_true",
        help="make the canonical DB with the sample generator and importer (real mrkdwn)",
    )
    source.add_argument(
        "--canonical", type=Path, help="start from a copy of this canonical DB instead"
    )
    parser.add_argument("--change", type=float, default=0.01, help="fraction edited")
    parser.add_argument("--home", type=Path, help="SLACKQUERY_HOME to use (default: a temp dir)")
    parser.add_argument(
        "--with-tests", action="store_true", help="time `dbt build` (models + tests)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="project-bench-") as scratch:
        home = args.home or Path(scratch)
        home.mkdir(parents=True, exist_ok=True)
        canonical = home / "canonical.duckdb"
        for stale in (canonical, home / "state.duckdb"):
            stale.unlink(missing_ok=True)
        started = time.perf_counter()
        figures: dict = {"source": "synthetic", "cpu_count": os.cpu_count()}
        if args.canonical:
            shutil.copyfile(args.canonical, canonical)
            figures["source"] = str(args.canonical)
        elif args.sample:
            figures.update(make_sample_canonical(home, args.messages), source="sample")
        else:
            fill_canonical(canonical, args.messages)
        figures["generate_s"] = round(time.perf_counter() - started, 2)
        figures["messages"] = _count_messages(canonical)
        figures["with_tests"] = args.with_tests
        figures["full"] = run_projection(home, full_refresh=True, with_tests=args.with_tests)
        figures["changed_messages"] = change_messages(canonical, args.change)
        figures["incremental"] = run_projection(
            home, full_refresh=False, with_tests=args.with_tests
        )
        figures["canonical_mib"] = round(canonical.stat().st_size / 2**20, 1)
        figures["state_mib"] = round((home / "state.duckdb").stat().st_size / 2**20, 1)
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for phase in ("full", "incremental"):
            run = figures[phase]
            sys.stdout.write(
                f"{phase:<12} {run['wall_s']:>7.2f} s wall  {run['dbt_s']:>7.2f} s project()  "
                f"{run['models_s']:>7.2f} s models  {run['cpu_s']:>7.2f} s CPU  "
                f"{run['peak_rss_mib']:>7.1f} MiB peak RSS  "
                f"load {run['load_1m'][0]:.2f}->{run['load_1m'][1]:.2f}\n"
                f"{'':<12} {json.dumps(run['model_s'])}\n"
            )
        sys.stdout.write(
            f"{figures['messages']} messages ({figures['source']}), "
            f"{figures['changed_messages']} changed, made in {figures['generate_s']} s; "
            f"canonical {figures['canonical_mib']} MiB, state {figures['state_mib']} MiB\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
