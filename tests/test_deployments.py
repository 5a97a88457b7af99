"""prefect.yaml: each deployment's parameters are ones its entrypoint flow takes."""

import importlib
import inspect
from datetime import date
from pathlib import Path

import pytest
import yaml
from prefect import Flow
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"
DEPLOYMENTS = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))["deployments"]


def _flow(entrypoint: str) -> Flow:
    path, name = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def _flow_parameters(entrypoint: str) -> set[str]:
    return set(inspect.signature(_flow(entrypoint).fn).parameters)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_parameter_is_one_the_flow_takes(deployment: dict) -> None:
    assert set(deployment["parameters"]) <= _flow_parameters(deployment["entrypoint"])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_deployment_that_embeds_can_embed_on_dask(deployment: dict) -> None:
    # Both run reconcile, whose embed step fans out over Dask when asked.
    assert {"dask_address", "dask_workers"} <= set(deployment["parameters"])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_parameter_value_is_one_the_flow_accepts(deployment: dict) -> None:
    _flow(deployment["entrypoint"]).validate_parameters(deployment["parameters"])


def test_the_sync_deployment_takes_since_as_an_iso_day() -> None:
    # README: after an import, the deployment's runs pass --since (the export's last day).
    deployment = next(d for d in DEPLOYMENTS if d["name"] == "sync-every-15-minutes")
    assert deployment["parameters"]["since"] is None  # listed, so an operator can set it
    flow = _flow(deployment["entrypoint"])
    validated = flow.validate_parameters({**deployment["parameters"], "since": "2024-03-31"})
    assert validated["since"] == date(2024, 3, 31)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_a_run_due_while_one_runs_is_cancelled_not_queued(deployment: dict) -> None:
    # Queued runs of a slow sync (Slack unreachable: 25 minutes a run) piled up behind it.
    limit = ConcurrencyLimitConfig.model_validate(deployment["concurrency_limit"])
    assert (limit.limit, limit.collision_strategy) == (1, ConcurrencyLimitStrategy.CANCEL_NEW)
