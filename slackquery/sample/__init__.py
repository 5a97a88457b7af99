"""A deterministic sample Slack workspace: a standard export ZIP plus a judged query file.

`generate_sample(out, messages=N, seed=S)` writes a fictional team's "all conversations"
export (public and private channels, DMs, a group DM, threads, bots, system messages)
with planted facts, and `<stem>.queries.yaml` next to it in the Beacon query format.
The same seed and N always give a byte-identical ZIP, so tests and benchmarks can rely on it.
"""

from slackquery.sample.generator import MIN_MESSAGES, generate_sample

__all__ = ["MIN_MESSAGES", "generate_sample"]
