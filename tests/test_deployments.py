"""prefect.yaml: each deployment's parameters are ones its entrypoint flow takes."""

import importlib
import inspect
from pathlib import Path

import pytest
import yaml

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"
DEPLOYMENTS = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))["deployments"]


def _flow_parameters(entrypoint: str) -> set[str]:
    path, name = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return set(inspect.signature(getattr(module, name).fn).parameters)


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_parameter_is_one_the_flow_takes(deployment: dict) -> None:
    assert set(deployment["parameters"]) <= _flow_parameters(deployment["entrypoint"])


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=[d["name"] for d in DEPLOYMENTS])
def test_every_deployment_that_embeds_can_embed_on_dask(deployment: dict) -> None:
    # Both run reconcile, whose embed step fans out over Dask when asked.
    assert {"dask_address", "dask_workers"} <= set(deployment["parameters"])
