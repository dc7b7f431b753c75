"""Whether a crashed campaign run left an orphan to tear down, decided as data (docs/events.md §4).

The Crashed automation hands the orphan teardown only the crashed run's id. From that run's parameters it
finds the campaign (a ``campaign`` run carries the whole spec, a ``serve`` run the campaign id and its home
region); it then tears down only when no other run of that campaign is live: Running, Pending, Cancelling,
or Scheduled to start soon (a Late run is Scheduled with a start in the past, so it counts). Paid capacity
is sacred: anything it cannot tell for sure (an unreadable spec, a run of another flow) means no teardown
and a notification instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from capserve.core.schedule import campaign_tag
from capserve.core.spec import CampaignSpec

ORPHAN_FLOWS = ("campaign", "serve")
"""Flows whose crashed runs may leave a campaign's resources behind."""

RUNNING_STATES = frozenset({"RUNNING", "PENDING", "CANCELLING", "PAUSED"})
"""Prefect state types of a run that is (or is about to be) doing something."""


class RunFacts(BaseModel):
    """What the orphan check needs to know of one flow run on the server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=64, description="The flow run's id.")
    name: str = Field(max_length=300, description="The flow run's name (e.g. 'serve-k3-demo').")
    state_type: str = Field(max_length=32, description="Prefect state type, e.g. 'RUNNING'.")
    state_name: str = Field(default="", max_length=100, description="Prefect state name, e.g. 'Late'.")
    expected_start: AwareDatetime | None = Field(None, description="When a scheduled run is due.")
    campaign_id: str | None = Field(None, max_length=64, description="The campaign it belongs to, if known.")
    subflow: bool = Field(False, description="A subflow run: part of its parent run, live only as the parent is.")


class OrphanTarget(BaseModel):
    """The campaign a crashed run belonged to, as far as its parameters say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    home_region: str | None = Field(
        None, max_length=32, description="Region of its record (a serve run's 'region'); None: from the spec."
    )
    spec: CampaignSpec | None = Field(None, description="The spec a campaign run was given; None for a serve run.")


def campaign_in_parameters(parameters: Mapping[str, Any], tags: Sequence[str] = ()) -> str | None:
    """The campaign a run works on: its campaign tag, its ``campaign_id`` parameter or its spec's name."""
    prefix = campaign_tag("")
    for tag in tags:
        if tag.startswith(prefix) and len(tag) > len(prefix):
            return tag.removeprefix(prefix)
    value = parameters.get("campaign_id")
    if isinstance(value, str) and value:
        return value
    spec = parameters.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and spec["name"]:
        return str(spec["name"])
    return None


def orphan_target(flow_name: str, parameters: Mapping[str, Any]) -> OrphanTarget | str:
    """The crashed run's campaign, or why it cannot be told for sure (then nothing is torn down)."""
    if flow_name not in ORPHAN_FLOWS:
        return f"a run of flow {flow_name!r} is not a campaign run ({' or '.join(ORPHAN_FLOWS)})"
    if flow_name == "serve":
        campaign_id, region = parameters.get("campaign_id"), parameters.get("region")
        if not isinstance(campaign_id, str) or not campaign_id or not isinstance(region, str) or not region:
            return "the serve run names no campaign_id and region"
        return OrphanTarget(campaign_id=campaign_id, home_region=region)
    try:
        spec = CampaignSpec.model_validate(parameters.get("spec"))
    except ValidationError as exc:
        return f"the campaign run's spec no longer validates ({exc.error_count()} errors)"
    return OrphanTarget(campaign_id=spec.campaign_id, spec=spec)


def live_runs(campaign_id: str, runs: Sequence[RunFacts], *, now: datetime, soon: timedelta) -> list[RunFacts]:
    """The runs of ``campaign_id`` that are live or due within ``soon``.

    The crashed run is not set aside: a Crashed run is not live, and a run that is Running again (or was never
    crashed: the orphan teardown was started by hand with a healthy run's id) must keep its cluster.
    """
    live = []
    for run in runs:
        if run.campaign_id != campaign_id or run.subflow:
            # A subflow (a stage of a campaign or serve run, tagged with its campaign) is live only with its
            # parent, which is judged on its own: one left Running by a crashed parent is not someone at work.
            continue
        due = run.state_type == "SCHEDULED" and (run.expected_start is None or run.expected_start <= now + soon)
        if run.state_type in RUNNING_STATES or due:
            live.append(run)
    return live


def left_alone(campaign_id: str, live: Sequence[RunFacts]) -> str:
    """The message of an orphan teardown that found live runs."""
    named = ", ".join(f"{run.name} ({run.id}, {run.state_name or run.state_type})" for run in live[:5])
    more = f" and {len(live) - 5} more" if len(live) > 5 else ""
    return f"campaign {campaign_id} still has live runs: {named}{more}; nothing was torn down"
