"""capserve's automations, declared here and registered with the deployments (docs/events.md §4).

Python (``prefect.automations``), not ``prefect.yaml`` ``triggers:``: a deployment trigger can only start
its own deployment, while the expiration warning starts two (drain, then teardown) and the Crashed and Late
automations match runs of *other* deployments; the automations also need the target deployments' ids,
which exist only once the deployments are registered. ``register_automations`` converges by name (update
an existing automation, create a missing one), so it can run after every ``capserve deploy`` (which runs it).

| automation | fires on | starts |
|---|---|---|
| ``capserve-redeploy-on-new-revision`` | ``capserve.model.revision-published`` | redeploy (campaign, sha, region) |
| ``capserve-drain-on-expiration-warning`` | ``capserve.aws.capacity-block.expiration-warning`` | drain, then teardown |
| ``capserve-crash-silent-campaign-run`` | a ``campaign`` run's heartbeat, then silence | marks the run Crashed |
| ``capserve-teardown-crashed-campaign`` | ``prefect.flow-run.Crashed`` of a ``campaign`` run | teardown of orphans |
| ``capserve-notify-late-teardown`` | ``prefect.flow-run.Late`` of a (``scheduled-``)``teardown`` run | notify |

Campaign id and region come from the event (``event.resource['prefect.resource.name']``,
``event.payload.region``); the Crashed automation passes the crashed run's id, and its target decides
from that run's parameters whether the campaign still has a live run before tearing anything down.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from uuid import UUID

from prefect.automations import Automation, ChangeFlowRunState, EventTrigger, Posture, RunDeployment
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import AutomationSort
from prefect.events.filters import AutomationFilter, AutomationFilterName
from prefect.events.schemas.automations import AutomationCore
from prefect.exceptions import ObjectNotFound
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import PermanentError
from capserve.core.events import CAMPAIGN_PREFIX, EventName
from capserve.tasks.resilience import orchestrator_task

CAMPAIGN = "{{ event.resource['prefect.resource.name'] }}"
TEARDOWN_FLOWS = ("scheduled-teardown", "teardown")
"""Flows whose Late runs need a person: the one a lease schedules, and the one `capserve down` runs."""
CRASHED_RUN = "{{ event.resource['prefect.resource.id'] | replace('prefect.flow-run.', '') }}"
WARNED = "{{ event.payload.reservation_id }}"


class AutomationTargets(BaseModel):
    """The deployments (``flow/deployment``) the automations start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redeploy: str = Field("redeploy/redeploy", max_length=200, description="Stages, rolls out, evaluates.")
    drain: str = Field("drain/drain", max_length=200, description="Stops traffic to a campaign's endpoint.")
    teardown: str = Field(
        "scheduled-teardown/scheduled-teardown", max_length=200,
        description="Tears a campaign down from its id and region.",
    )
    orphan_teardown: str = Field(
        "teardown-orphan/teardown-orphan", max_length=200,
        description="Given a crashed campaign run, tears down when the campaign has no live run.",
    )
    notify: str = Field("notify/notify", max_length=200, description="Tells a person (a log and an artifact).")
    silent_after_seconds: int = Field(
        600, ge=10, le=86_400,
        description="A campaign run with no event this long after a heartbeat is marked Crashed. Prefect's "
        "heartbeat comes every 180 s by default (PREFECT_FLOWS_HEARTBEAT_FREQUENCY): keep this 3× that.",
    )

    def deployments(self) -> list[str]:
        return sorted({self.redeploy, self.drain, self.teardown, self.orphan_teardown, self.notify})


def _on_campaign(event: EventName) -> EventTrigger:
    return EventTrigger(
        expect={str(event)},
        match={"prefect.resource.id": f"{CAMPAIGN_PREFIX}*"},
        for_each={"prefect.resource.id"},
        posture=Posture.Reactive,
        threshold=1,
    )


def _on_flow_run(state: str, flow_names: list[str]) -> EventTrigger:
    return EventTrigger(
        expect={f"prefect.flow-run.{state}"},
        match={"prefect.resource.id": "prefect.flow-run.*"},
        match_related={"prefect.resource.role": "flow", "prefect.resource.name": flow_names},
        for_each={"prefect.resource.id"},
        posture=Posture.Reactive,
        threshold=1,
    )


def _silent_campaign_run(within: timedelta) -> EventTrigger:
    """A heartbeat of a campaign run, then no event of that run at all for ``within`` (any flow-run event,
    including terminal states with custom names, counts as a sign of life)."""
    return EventTrigger(
        after={"prefect.flow-run.heartbeat"},
        expect={"prefect.flow-run.*"},
        match={"prefect.resource.id": "prefect.flow-run.*"},
        match_related={"prefect.resource.role": "flow", "prefect.resource.name": "campaign"},
        for_each={"prefect.resource.id"},
        posture=Posture.Proactive,
        threshold=1,
        within=within,
    )


def build_automations(ids: Mapping[str, UUID], targets: AutomationTargets) -> list[Automation]:
    """The automations, with ``ids`` mapping each target deployment name to its id."""

    def run(name: str, parameters: dict[str, str]) -> RunDeployment:
        return RunDeployment(source="selected", deployment_id=ids[name], parameters=parameters)

    where = {"campaign_id": CAMPAIGN, "region": "{{ event.payload.region }}"}
    return [
        Automation(
            name="capserve-redeploy-on-new-revision",
            description="A running campaign's branch moved on the Hub: redeploy it (docs/events.md §4).",
            trigger=_on_campaign(EventName.REVISION_PUBLISHED),
            actions=[run(targets.redeploy, {
                "campaign_id": CAMPAIGN, "revision": "{{ event.payload.revision }}", "trigger": "revision-published",
                "region": "{{ event.payload.home_region }}",  # where the record lives (the hub watcher's region)
            })],
        ),
        Automation(
            name="capserve-drain-on-expiration-warning",
            description="AWS will terminate the block's instances in 10 minutes: drain, then tear down now.",
            trigger=_on_campaign(EventName.CAPACITY_BLOCK_EXPIRATION_WARNING),
            # The warning's reservation: a late warning about a block the campaign no longer holds (a queue
            # drained days later) must not drain the block it holds now; those runs end "Stale".
            actions=[
                run(targets.drain, {**where, "reservation_id": WARNED, "reason": "expiration-warning"}),
                run(targets.teardown, {**where, "reservation_id": WARNED, "reason": "expiration-warning"}),
            ],
        ),
        Automation(
            name="capserve-crash-silent-campaign-run",
            description="A campaign run stopped sending heartbeats (its host died): mark it Crashed, which starts "
            "the crashed-campaign teardown.",
            trigger=_silent_campaign_run(timedelta(seconds=targets.silent_after_seconds)),
            actions=[ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"capserve: no heartbeat for {targets.silent_after_seconds} s (docs/events.md §4)",
            )],
        ),
        Automation(
            name="capserve-teardown-crashed-campaign",
            description="A campaign run crashed: tear its campaign down if no other run of it is live.",
            trigger=_on_flow_run("Crashed", ["campaign"]),
            actions=[run(targets.orphan_teardown, {"flow_run_id": CRASHED_RUN})],
        ),
        Automation(
            name="capserve-notify-late-teardown",
            description="A scheduled teardown is late (no worker took it): a person must look now.",
            trigger=_on_flow_run("Late", list(TEARDOWN_FLOWS)),
            actions=[run(targets.notify, {
                "subject": "capserve teardown run is late",
                "body": "teardown run {{ event.resource['prefect.resource.name'] }} "
                        "({{ event.resource['prefect.resource.id'] }}) is Late: is a worker polling the pool?",
            })],
        ),
    ]


@orchestrator_task("register-automations")
def register_automations(targets: AutomationTargets | None = None) -> list[str]:
    """Create or update every automation; refuses, naming them, when target deployments are not registered."""
    targets = targets or AutomationTargets()
    registered = []
    # One client for every call (Prefect's Automation.read, .create and .update each open one of their own).
    with get_client(sync_client=True) as client:
        ids: dict[str, UUID] = {}
        missing: list[str] = []
        for name in targets.deployments():
            try:
                ids[name] = client.read_deployment_by_name(name).id
            except ObjectNotFound:
                missing.append(name)
        if missing:
            raise PermanentError(
                f"cannot register capserve's automations: no deployment {', '.join(missing)} on this Prefect server; "
                "register the deployments first (`capserve deploy` does both), or name others in AutomationTargets"
            )
        wanted = build_automations(ids, targets)
        existing: dict[str, UUID] = {}  # by name: the most recently updated, the one Automation.read(name=) returns
        for found in client.read_automations(
            automations=AutomationFilter(name=AutomationFilterName(any_=[a.name for a in wanted])),
            sort=AutomationSort.UPDATED_DESC,
        ):
            existing.setdefault(found.name, found.id)
        for automation in wanted:
            if automation.name in existing:
                client.update_automation(existing[automation.name], AutomationCore(
                    **automation.model_dump(exclude={"id", "owner_resource"})))
            else:
                client.create_automation(AutomationCore(**automation.model_dump(exclude={"id"})))
            registered.append(automation.name)
    return registered
