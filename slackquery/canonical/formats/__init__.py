"""One loader per input format; each stages its input for the importer's one merge.

A loader is built from `(settings, path, slug_hint, warnings)`, checks its input without
touching the store, and `stage(connection)` fills the stage tables and returns `Staged`.
"""

from slackquery.canonical.formats.beacon_jsonl import BeaconLoader
from slackquery.canonical.formats.slack_export import SlackExportLoader

LOADERS = {"slack-export": SlackExportLoader, "beacon-jsonl": BeaconLoader}

__all__ = ["LOADERS", "BeaconLoader", "SlackExportLoader"]
