"""capserve's automations on a real local Prefect server (the session's test harness): each fires on its event
and starts exactly one run of the right deployment with the right parameters; a duplicate event does nothing.

The target deployments are stubs (flows registered by name, no worker): a run created by an automation
stays Scheduled, which is all these tests look at.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import StateType
from prefect.events import emit_event
from prefect.events.worker import EventsWorker
from prefect.states import Running

from capserve.core.errors import PermanentError
from capserve.tasks.automations import AutomationTargets, register_automations

SHA = "c" * 40
TARGETS = AutomationTargets(
    redeploy="redeploy-stub/redeploy", drain="drain-stub/drain", teardown="teardown-stub/teardown-campaign",
    orphan_teardown="teardown-stub/teardown-orphan", notify="notify-stub/notify", silent_after_seconds=10,
)


@pytest.fixture(scope="module")
def deployments() -> Iterator[dict[str, uuid.UUID]]:
    ids = {}
    with get_client(sync_client=True) as client:
        for name in TARGETS.deployments():
            flow_name, deployment = name.split("/")
            flow_id = client.create_flow_from_name(flow_name)
            ids[name] = client.create_deployment(flow_id, deployment)
    assert sorted(register_automations.fn(TARGETS)) == [
        "capserve-crash-silent-campaign-run", "capserve-drain-on-expiration-warning",
        "capserve-notify-late-teardown", "capserve-redeploy-on-new-revision", "capserve-teardown-crashed-campaign",
    ]
    register_automations.fn(TARGETS)  # converges: updates, never duplicates
    with get_client(sync_client=True) as client:
        names = [a.name for a in client.read_automations() if a.name.startswith("capserve-")]
    assert len(names) == 5
    time.sleep(2)  # the triggers service loads new automations from its change feed
    yield ids
    # The session's server is shared: a 10-second zombie trigger must not outlive these tests.
    with get_client(sync_client=True) as client:
        for automation in client.read_automations():
            if automation.name.startswith("capserve-"):
                client.delete_automation(automation.id)


def runs_of(deployment_id: uuid.UUID, expected: int) -> list[Any]:
    """The deployment's runs, once ``expected`` exist (bounded wait; more than expected shows up too)."""
    found: list[Any] = []
    of_deployment = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    with get_client(sync_client=True) as client:
        for _ in range(60):
            found = client.read_flow_runs(deployment_filter=of_deployment)
            if len(found) >= expected:
                break
            time.sleep(0.5)
    return found


def send(event: str, resource: dict[str, str], *, payload: dict[str, Any] | None = None,
         related: list[dict[str, str]] | None = None, event_id: uuid.UUID | None = None) -> uuid.UUID:
    sent_id = event_id or uuid.uuid4()
    emit_event(event, resource=resource, payload=payload or {}, related=related or [], id=sent_id,
               occurred=datetime.now(UTC))
    EventsWorker.drain_all()
    return sent_id


def campaign(name: str) -> dict[str, str]:
    return {"prefect.resource.id": f"capserve.campaign.{name}", "prefect.resource.name": name}


def test_a_published_revision_starts_one_redeploy_and_its_duplicate_none(deployments: dict[str, uuid.UUID]) -> None:
    target = deployments[TARGETS.redeploy]
    payload = {"revision": SHA, "home_region": "us-east-2"}
    first = send("capserve.model.revision-published", campaign("c-rev"), payload=payload)
    [run] = runs_of(target, 1)
    assert run.parameters == {
        "campaign_id": "c-rev", "revision": SHA, "trigger": "revision-published", "region": "us-east-2"
    }
    send("capserve.model.revision-published", campaign("c-rev"), payload=payload, event_id=first)
    send("capserve.model.other", campaign("c-rev"), payload=payload)  # not an event it expects
    time.sleep(5)  # long enough for a wrongly fired automation to show its run
    assert len(runs_of(target, 1)) == 1


def test_the_expiration_warning_drains_then_tears_down_that_campaign(deployments: dict[str, uuid.UUID]) -> None:
    send("capserve.aws.capacity-block.expiration-warning", campaign("c-exp"),
         payload={"region": "us-east-2", "reservation_id": "cr-1", "kind": "expiration-warning"})
    [drain] = runs_of(deployments[TARGETS.drain], 1)
    [teardown] = runs_of(deployments[TARGETS.teardown], 1)
    # The warning's reservation goes with them: a late warning about a block the campaign no longer holds
    # ends Stale instead of draining the one it holds now.
    expected = {"campaign_id": "c-exp", "region": "us-east-2", "reservation_id": "cr-1", "reason": "expiration-warning"}
    assert drain.parameters == expected
    assert teardown.parameters == expected


def test_a_crashed_campaign_run_asks_for_an_orphan_teardown_and_a_late_teardown_notifies(
    deployments: dict[str, uuid.UUID],
) -> None:
    crashed, other = uuid.uuid4(), uuid.uuid4()
    flow = {"prefect.resource.id": f"prefect.flow.{uuid.uuid4()}", "prefect.resource.role": "flow"}
    send("prefect.flow-run.Crashed", {"prefect.resource.id": f"prefect.flow-run.{other}"},
         related=[{**flow, "prefect.resource.name": "reaper"}])  # not a campaign run: nothing
    send("prefect.flow-run.Crashed", {"prefect.resource.id": f"prefect.flow-run.{crashed}"},
         related=[{**flow, "prefect.resource.name": "campaign"}])
    [orphan] = runs_of(deployments[TARGETS.orphan_teardown], 1)
    assert orphan.parameters == {"flow_run_id": str(crashed)}

    late = uuid.uuid4()
    send("prefect.flow-run.Late", {"prefect.resource.id": f"prefect.flow-run.{late}",
                                   "prefect.resource.name": "teardown-k3"},
         related=[{**flow, "prefect.resource.name": "teardown"}])
    [notice] = runs_of(deployments[TARGETS.notify], 1)
    assert "teardown-k3" in notice.parameters["body"] and str(late) in notice.parameters["body"]
    scheduled_late = uuid.uuid4()  # the run a lease schedules is a run of the flow `scheduled-teardown`
    send("prefect.flow-run.Late", {"prefect.resource.id": f"prefect.flow-run.{scheduled_late}",
                                   "prefect.resource.name": "teardown-k4"},
         related=[{**flow, "prefect.resource.name": "scheduled-teardown"}])
    notices = runs_of(deployments[TARGETS.notify], 2)
    assert sorted("teardown-k4" in n.parameters["body"] for n in notices) == [False, True]
    time.sleep(3)
    assert len(runs_of(deployments[TARGETS.orphan_teardown], 1)) == 1


def test_a_silent_campaign_run_is_marked_crashed_and_then_torn_down(deployments: dict[str, uuid.UUID]) -> None:
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("campaign")
        stub = client.create_deployment(flow_id, "zombie-stub")
        silent, alive = (client.create_flow_run_from_deployment(stub) for _ in range(2))
        for run in (silent, alive):
            client.set_flow_run_state(run.id, Running(), force=True)
    flow = {"prefect.resource.id": f"prefect.flow.{flow_id}", "prefect.resource.role": "flow",
            "prefect.resource.name": "campaign"}

    def beat(run_id: uuid.UUID) -> None:
        send("prefect.flow-run.heartbeat", {"prefect.resource.id": f"prefect.flow-run.{run_id}"}, related=[flow])

    beat(silent.id)  # its host dies right after this heartbeat
    states: dict[uuid.UUID, StateType | None] = {}
    for _ in range(30):  # the alive run keeps beating while we wait (10 s silence + 5 s evaluation steps)
        beat(alive.id)
        time.sleep(2)
        with get_client(sync_client=True) as client:
            states = {r: client.read_flow_run(r).state_type for r in (silent.id, alive.id)}
        if states[silent.id] is StateType.CRASHED:
            break
    assert states == {silent.id: StateType.CRASHED, alive.id: StateType.RUNNING}
    orphans = runs_of(deployments[TARGETS.orphan_teardown], 2)
    assert {"flow_run_id": str(silent.id)} in [r.parameters for r in orphans]
    assert {"flow_run_id": str(alive.id)} not in [r.parameters for r in orphans]


def test_registering_without_the_target_deployments_names_them() -> None:
    with pytest.raises(PermanentError, match="no deployment nowhere/redeploy"):
        register_automations.fn(TARGETS.model_copy(update={"redeploy": "nowhere/redeploy"}))


def test_the_register_command_refuses_naming_the_deployments_that_are_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from capserve.cli import main

    assert main(["automations", "register"]) == 1  # the default targets are not deployed on this server
    err = capsys.readouterr().err
    assert "no deployment" in err and "scheduled-teardown/scheduled-teardown" in err and "capserve deploy" in err
