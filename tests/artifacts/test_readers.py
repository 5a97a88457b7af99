"""Readers querying `current` in a loop while publishes happen see no errors, and
every response comes from exactly one artifact."""

import json
import os
import subprocess
import sys
from pathlib import Path

from slackquery.artifacts import files
from slackquery.artifacts.build import build_artifact
from slackquery.artifacts.publish import publish
from slackquery.settings import Settings
from tests.artifacts.conftest import identity_for
from tests.artifacts.synthetic import synthesize_state

READER = r"""
import json, select, sys
import duckdb

current = sys.argv[1]
responses, errors = [], []
print("ready", flush=True)
while True:
    try:
        conn = duckdb.connect(current, read_only=True)
        try:
            responses.append(conn.execute(
                "select build_id, document_count, "
                "(select count(*) from search_documents), "
                "(select count(*) from document_vectors), vector_count "
                "from artifact_metadata"
            ).fetchall())
        finally:
            conn.close()
    except Exception as error:
        errors.append(repr(error))
    if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
        break
json.dump({"responses": responses, "errors": errors}, sys.stdout)
"""


def test_readers_see_one_artifact_per_response_during_four_publishes(
    state_settings: Settings,
) -> None:
    settings = state_settings
    first = build_artifact(settings)
    publish(settings, first)
    synthesize_state(settings.state_path, identity_for(settings), messages=66, seed=3)
    second = build_artifact(settings)
    current = settings.artifact_path / files.CURRENT_NAME
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(current)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "ready"
    for index in range(4):  # swap `current` back and forth under the reader
        publish(settings, second if index % 2 == 0 else first)
    reader.stdin.close()
    report = json.loads(reader.stdout.read())
    assert reader.wait(timeout=60) == 0
    assert report["errors"] == []
    assert report["responses"]
    for rows in report["responses"]:
        assert len(rows) == 1
        build_id, documents, document_rows, vector_rows, vectors = rows[0]
        assert build_id in (first, second)
        assert (documents, vectors) == (document_rows, vector_rows)  # one file per response
