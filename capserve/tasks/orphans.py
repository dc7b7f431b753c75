"""Reading flow runs from the Prefect API for the orphan teardown (the decisions are ``capserve.core.orphans``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.exceptions import ObjectNotFound
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import PermanentError
from capserve.core.orphans import RunFacts, campaign_in_parameters
from capserve.tasks.resilience import orchestrator_task

IN_FLIGHT = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING, StateType.PAUSED, StateType.SCHEDULED]
READ_LIMIT = 200  # the API's page size: flow runs in flight on one server are far fewer


class CrashedRun(BaseModel):
    """The run the Crashed automation named: its flow and the parameters it was given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=64, description="The flow run's id.")
    name: str = Field(max_length=300, description="The flow run's name.")
    flow_name: str = Field(max_length=200, description="The flow it is a run of.")
    state_type: str = Field(max_length=32, description="Its Prefect state type now.")
    parameters: dict[str, Any] = Field(description="The parameters it was started with.")


@orchestrator_task("read-crashed-run")
def read_crashed_run(flow_run_id: str) -> CrashedRun:
    """The run ``flow_run_id`` and its flow's name; refuses when the id is not a run of this server."""
    try:
        run_id = UUID(flow_run_id)
    except ValueError as exc:
        raise PermanentError(f"flow_run_id {flow_run_id!r} is not a flow run id (a UUID)") from exc
    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(run_id)
        except ObjectNotFound as exc:
            raise PermanentError(
                f"no flow run {flow_run_id} on this Prefect server: check the automation's event"
            ) from exc
        flow_name = client.read_flow(run.flow_id).name
    return CrashedRun(id=str(run.id), name=run.name, flow_name=flow_name,
                      state_type=run.state_type.value if run.state_type else "", parameters=dict(run.parameters))


@orchestrator_task("read-runs-in-flight")
def runs_in_flight() -> list[RunFacts]:
    """Every run that is running, about to run or scheduled, with the campaign it belongs to (if any)."""
    in_flight = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=IN_FLIGHT)))
    with get_client(sync_client=True) as client:
        runs: list[FlowRun] = client.read_flow_runs(flow_run_filter=in_flight, limit=READ_LIMIT)
    if len(runs) >= READ_LIMIT:
        # More than one page: the check might miss a live run, so it must not decide.
        raise PermanentError(
            f"more than {READ_LIMIT} flow runs in flight on this Prefect server: cannot tell for sure whether a "
            "campaign has a live run; tear it down by hand (`capserve down`) once its runs are done"
        )
    return [
        RunFacts(
            id=str(run.id), name=run.name, state_type=run.state_type.value if run.state_type else "",
            state_name=run.state_name or "", expected_start=_due(run),
            campaign_id=campaign_in_parameters(run.parameters, run.tags), subflow=run.parent_task_run_id is not None,
        )
        for run in runs
    ]


def _due(run: FlowRun) -> datetime | None:
    """When a scheduled run starts: its Scheduled state's time (a rescheduled run keeps its first
    ``expected_start_time``), else the expected start."""
    scheduled = run.state.state_details.scheduled_time if run.state is not None else None
    return scheduled or run.expected_start_time
