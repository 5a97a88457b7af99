"""`slackquery embed` with the hash embedder, for the flow-kill test's subprocess."""

import sys

import slackquery.embedding.work as work
from slackquery.cli import main
from tests.flows.hash_embedder import load

if __name__ == "__main__":
    work.build_embedder = lambda _settings: load()
    sys.exit(main(["embed", "--json", "--engine", "prefect", *sys.argv[1:]]))
