"""`--engine`: which runs are Prefect flow runs, and what their temporary API may send."""

import argparse
import os

import pytest

from slackquery.commands import use_prefect

ANALYTICS = "PREFECT_SERVER_ANALYTICS_ENABLED"


@pytest.mark.parametrize(
    ("engine", "api_url", "chosen"),
    [
        ("prefect", None, True),
        ("plain", "http://127.0.0.1:4200/api", False),
        ("auto", None, False),
        ("auto", "http://127.0.0.1:4200/api", True),
    ],
)
def test_a_flow_run_sends_no_usage_data(
    engine: str, api_url: str | None, chosen: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ANALYTICS, raising=False)
    if api_url is None:
        monkeypatch.delenv("PREFECT_API_URL", raising=False)
    else:
        monkeypatch.setenv("PREFECT_API_URL", api_url)
    assert use_prefect(argparse.Namespace(engine=engine)) is chosen
    assert ("false" if chosen else None) == os.environ.get(ANALYTICS)


def test_a_dask_run_is_a_flow_run_that_sends_no_usage_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `--dask-workers` under `--engine auto` without an API: the flow's temporary API sent it.
    monkeypatch.delenv(ANALYTICS, raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert use_prefect(argparse.Namespace(engine="auto"), dask=True)
    assert os.environ[ANALYTICS] == "false"


def test_an_operators_own_analytics_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ANALYTICS, "true")
    assert use_prefect(argparse.Namespace(engine="prefect"))
    assert os.environ[ANALYTICS] == "true"
