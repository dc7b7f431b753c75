"""deployments/prefect.yaml points at real flows with parameters those flows accept."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect import Flow
from prefect.utilities.callables import parameter_schema

from capserve.tasks.scheduling import TEARDOWN_DEPLOYMENT

PREFECT_YAML = Path(__file__).resolve().parents[2] / "deployments" / "prefect.yaml"
DEPLOYMENTS: list[dict[str, Any]] = yaml.safe_load(PREFECT_YAML.read_text())["deployments"]


def load_flow(entrypoint: str) -> Flow[Any, Any]:
    path, name = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    found = getattr(module, name)
    assert isinstance(found, Flow), f"{entrypoint} is not a Prefect flow"
    return found


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["name"])
def test_each_deployment_names_a_flow_and_only_parameters_it_takes(deployment: dict[str, Any]) -> None:
    flow = load_flow(deployment["entrypoint"])
    accepted = set(parameter_schema(flow.fn).properties)
    assert set(deployment.get("parameters", {})) <= accepted


def test_the_teardown_the_campaign_schedules_exists() -> None:
    flow_name, deployment_name = TEARDOWN_DEPLOYMENT.split("/")
    names = {(load_flow(d["entrypoint"]).name, d["name"]) for d in DEPLOYMENTS}
    assert (flow_name, deployment_name) in names


def test_reaper_parameters_validate_against_the_flow() -> None:
    reaper = next(d for d in DEPLOYMENTS if d["name"] == "reaper")
    flow = load_flow(reaper["entrypoint"])
    flow.validate_parameters(reaper["parameters"])
