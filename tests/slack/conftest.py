"""A generated sample workspace served by the loopback Slack Web API, and a fake clock."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slackquery.sample import generate_sample
from slackquery.sample.workspace import TEAM_DOMAIN, TEAM_NAME
from slackquery.settings import Settings, get_settings
from tests.loopback import serve
from tests.slack.server import TOKEN, FakeSlack

SAMPLE_MESSAGES = 400
PAGE_SIZE = 16  # small pages, so the busy channels take several


class FakeClock:
    """Time that moves only when someone waits: pacing and backoff cost no real time."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture(scope="session")
def sample_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample workspace's export (seeded, byte-identical every time)."""
    path = tmp_path_factory.mktemp("sample") / "fjordline.zip"
    generate_sample(path, messages=SAMPLE_MESSAGES, seed=11)
    return path


def last_ts_s(slack: FakeSlack) -> float:
    """Seconds of the newest message in the served workspace."""
    return max(float(ts) for messages in slack.messages.values() for ts in messages)


@dataclass
class Live:
    """A served workspace and settings that point `sync` at it."""

    slack: FakeSlack
    clock: FakeClock
    url: str
    settings: Settings


@pytest.fixture
def live(sample_zip: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    """The sample served on a free port; the clock starts a day after its last message."""
    clock = FakeClock(0.0)
    slack = FakeSlack.from_export(sample_zip, clock, team_name=TEAM_NAME, domain=TEAM_DOMAIN)
    clock.now = last_ts_s(slack) + 86_400
    with serve(slack.app) as url:
        monkeypatch.setenv("SLACKQUERY_SLACK_TOKEN", TOKEN)
        monkeypatch.setenv("SLACKQUERY_SLACK_API_URL", f"{url}/api")
        monkeypatch.setenv("SLACKQUERY_SLACK_REQUESTS_PER_MINUTE", "0")
        monkeypatch.setenv("SLACKQUERY_SLACK_PAGE_SIZE", str(PAGE_SIZE))
        yield Live(slack, clock, url, get_settings())
