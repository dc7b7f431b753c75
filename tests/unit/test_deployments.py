"""capserve/deployments/prefect.yaml (package data) points at real flows, by module path, with parameters those flows
accept."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect import Flow
from prefect.utilities.callables import parameter_schema

import capserve.deployments
from capserve.core.schedule import DEPLOYMENTS as SCHEDULED_DEPLOYMENTS
from capserve.core.schedule import ScheduledStage
from capserve.tasks.automations import AutomationTargets

PREFECT_YAML = Path(capserve.deployments.__file__).parent / capserve.deployments.FILE
DEPLOYMENTS: list[dict[str, Any]] = yaml.safe_load(PREFECT_YAML.read_text())["deployments"]


def load_flow(entrypoint: str) -> Flow[Any, Any]:
    path, _, name = entrypoint.rpartition(".")
    module = importlib.import_module(path)
    found = getattr(module, name)
    assert isinstance(found, Flow), f"{entrypoint} is not a Prefect flow"
    return found


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["name"])
def test_each_deployment_names_a_flow_and_only_parameters_it_takes(deployment: dict[str, Any]) -> None:
    flow = load_flow(deployment["entrypoint"])
    accepted = set(parameter_schema(flow.fn).properties)
    assert set(deployment.get("parameters", {})) <= accepted


@pytest.mark.parametrize("stage", sorted(SCHEDULED_DEPLOYMENTS), ids=str)
def test_every_run_a_lease_schedules_has_its_deployment(stage: str) -> None:
    flow_name, deployment_name = SCHEDULED_DEPLOYMENTS[ScheduledStage(stage)].split("/")
    names = {(load_flow(d["entrypoint"]).name, d["name"]) for d in DEPLOYMENTS}
    assert (flow_name, deployment_name) in names


def test_scheduled_runs_need_only_the_campaign_region_and_reservation() -> None:
    for flow_and_name in SCHEDULED_DEPLOYMENTS.values():
        deployment = next(d for d in DEPLOYMENTS if d["name"] == flow_and_name.split("/")[1])
        schema = parameter_schema(load_flow(deployment["entrypoint"]).fn)
        assert {"campaign_id", "region", "reservation_id"} <= set(schema.properties)
        assert set(schema.required or []) <= {"campaign_id", "region", "reservation_id"}


def test_no_pull_step_depends_on_an_undocumented_variable() -> None:
    document = yaml.safe_load(PREFECT_YAML.read_text())
    assert "pull" not in document  # `capserve deploy` gives the pull step (the header says so)
    assert all(d["work_pool"]["job_variables"]["stream_output"] is False for d in DEPLOYMENTS)


def test_the_loader_reads_every_deployment_with_a_module_path_entrypoint() -> None:
    loaded = capserve.deployments.definitions()
    assert [d.name for d in loaded] == [d["name"] for d in DEPLOYMENTS]
    reaper = next(d for d in loaded if d.name == "reaper")
    assert (reaper.module, reaper.function) == ("capserve.flows.reaper", "reaper")
    assert reaper.concurrency_limit == {"limit": 1, "collision_strategy": "ENQUEUE"}
    assert reaper.job_variables == {"stream_output": False}


def test_periodic_watches_never_overlap_nor_cancel_each_other_and_campaigns_are_not_serialized() -> None:
    by_name = {d["name"]: d for d in DEPLOYMENTS}
    for watch in ("reaper", "hub-watcher"):  # a late watch waits for the one running: it is never cancelled
        assert by_name[watch]["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    assert all("concurrency_limit" not in by_name[name] for name in ("campaign", "serve", "drain"))


def test_reaper_parameters_validate_against_the_flow() -> None:
    reaper = next(d for d in DEPLOYMENTS if d["name"] == "reaper")
    flow = load_flow(reaper["entrypoint"])
    flow.validate_parameters(reaper["parameters"])


def test_every_automation_targets_a_deployment_of_the_file() -> None:
    names = {f"{load_flow(d['entrypoint']).name}/{d['name']}" for d in DEPLOYMENTS}
    assert set(AutomationTargets().deployments()) <= names


def test_the_hub_watcher_runs_on_a_schedule_over_regions_and_never_overlaps_itself() -> None:
    watcher = next(d for d in DEPLOYMENTS if d["name"] == "hub-watcher")
    load_flow(watcher["entrypoint"]).validate_parameters(watcher["parameters"])
    assert watcher["schedules"][0]["cron"] == "*/10 * * * *"
    assert watcher["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["name"])
def test_deploy_registers_the_parameter_schema_prefect_makes_of_the_flow(deployment: dict[str, Any]) -> None:
    """`capserve deploy` registers the schema the flow made when it was defined (``Flow.parameters``) instead of
    making it again: the UI's form is the one ``parameter_schema(flow)`` gives."""
    flow = load_flow(deployment["entrypoint"])
    assert flow.parameters.model_dump(exclude_unset=True) == parameter_schema(flow).model_dump(exclude_unset=True)
