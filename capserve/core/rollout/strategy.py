"""How a new configuration replaces the serving one, and how a failure goes back: decisions as data.

- **initial**: nothing serves yet: apply, wait until ready, evaluate, point the Services at it, then
  save the compile cache (last, so an upload failure never touches a server that already serves: the
  flow reports it as a warning and the next campaign starts cold).
- **blue-green**: the reservation holds two copies. The new colour comes up beside the old one, is
  evaluated, then the Services switch to it and the old colour is deleted. A failure before the
  switch only deletes the new colour: the old one never stopped serving.
- **recreate**: the reservation holds one copy only (one p6-b300 cannot hold two Kimi K3s). The old
  colour is deleted first (its GPUs are needed), then the new one comes up under the other colour.
  A failure means nothing serves: roll back by recreating the last good configuration.

- **unchanged**: what serves already runs this configuration (a re-run); the steps re-apply it under its
  own colour (server-side apply converges) and check it again.

Colours alternate, so the new workload never shares a name with the old one. The last good
configuration (a ``RolloutConfig``) is what the campaign record keeps; rolling back renders it again.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.rollout.config import RolloutConfig
from capserve.core.rollout.names import Color, other_color, workload_name

Strategy = Literal["initial", "blue-green", "recreate", "unchanged"]


class Step(enum.StrEnum):
    DELETE_OLD = "delete-old"  # delete the old colour's workload (and wait until its pods are gone)
    APPLY_NEW = "apply-new"  # server-side apply the new colour's workload
    WAIT_READY = "wait-ready"  # watch until every group is ready, within the startup budget
    SAVE_CACHE = "save-cache"  # after the switch: Jobs save the compile cache; a failure is a warning only
    EVALUATE = "evaluate"  # run the evaluation against the new colour
    SWITCH_SERVICE = "switch-service"  # point the Services at the new colour's leader


class Serving(BaseModel):
    """What serves now: a configuration under a colour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    color: Color = Field(description="Its colour.")
    config: RolloutConfig = Field(description="What it runs.")

    @property
    def name(self) -> str:
        return workload_name(self.color)


class RolloutDecision(BaseModel):
    """The ordered steps of one rollout (or rollback), with why this strategy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: Strategy = Field(description="initial | blue-green | recreate.")
    new_color: Color = Field(description="Colour that serves once the steps are done.")
    old_color: Color | None = Field(None, description="Colour the steps delete (None: nothing to delete).")
    rollback: bool = Field(False, description="True: the steps bring back the last good configuration.")
    steps: tuple[Step, ...] = Field(min_length=1, description="In order.")
    reason: str = Field(min_length=1, max_length=500, description="Why this strategy.")

    @property
    def new_name(self) -> str:
        return workload_name(self.new_color)

    @property
    def old_name(self) -> str | None:
        return workload_name(self.old_color) if self.old_color else None


def nodes_per_copy(config: RolloutConfig) -> int:
    return config.layout.nodes_per_replica * config.replicas


def choose_strategy(current: Serving | None, new: RolloutConfig, *, nodes_available: int) -> RolloutDecision:
    """Blue/green when the reservation's GPU nodes hold the old and the new copy at once, else recreate;
    unchanged when ``current`` already runs ``new``.

    ``nodes_available``: GPU nodes of the reservation (the lease's instance count, or the ready nodes).
    """
    if current is not None and current.config.revision == new.revision:
        return RolloutDecision(
            strategy="unchanged",
            new_color=current.color,
            steps=(Step.APPLY_NEW, Step.WAIT_READY, Step.EVALUATE, Step.SWITCH_SERVICE, Step.SAVE_CACHE),
            reason=f"{current.name} already serves revision {new.revision}: converge on it",
        )
    need = nodes_per_copy(new)
    if current is None:
        return RolloutDecision(
            strategy="initial",
            new_color="blue",
            steps=(Step.APPLY_NEW, Step.WAIT_READY, Step.EVALUATE, Step.SWITCH_SERVICE, Step.SAVE_CACHE),
            reason=f"nothing serves yet; the new configuration takes {need} of {nodes_available} GPU nodes",
        )
    both = nodes_per_copy(current.config) + need
    new_color = other_color(current.color)
    if both <= nodes_available:
        return RolloutDecision(
            strategy="blue-green",
            new_color=new_color,
            old_color=current.color,
            steps=(
                Step.APPLY_NEW,
                Step.WAIT_READY,
                Step.EVALUATE,
                Step.SWITCH_SERVICE,
                Step.DELETE_OLD,
                Step.SAVE_CACHE,
            ),
            reason=f"old and new copies need {both} GPU nodes and the reservation has {nodes_available}",
        )
    return RolloutDecision(
        strategy="recreate",
        new_color=new_color,
        old_color=current.color,
        steps=(Step.DELETE_OLD, Step.APPLY_NEW, Step.WAIT_READY, Step.EVALUATE, Step.SWITCH_SERVICE, Step.SAVE_CACHE),
        reason=(
            f"old and new copies would need {both} GPU nodes but the reservation has {nodes_available}: "
            "the old copy stops before the new one starts (the endpoint is down in between)"
        ),
    )


def rollback_decision(failed: RolloutDecision, last_good: Serving | None) -> RolloutDecision | None:
    """What undoes a failed rollout: None when nothing was ever good (the campaign tears down instead).

    Blue/green before the switch: the last good colour still serves; delete the failed one and make
    sure the Services point at the good one. After a recreate, nothing good runs: delete the failed
    colour and apply the last good configuration again under its own colour (the failed one's opposite).
    """
    if last_good is None:
        return None
    if failed.strategy == "blue-green":
        return RolloutDecision(
            strategy="blue-green",
            new_color=last_good.color,
            old_color=failed.new_color,
            rollback=True,
            steps=(Step.DELETE_OLD, Step.SWITCH_SERVICE),
            reason=f"{last_good.name} never stopped serving: delete {failed.new_name} and keep traffic on it",
        )
    good_color = other_color(failed.new_color)
    return RolloutDecision(
        strategy="recreate",
        new_color=good_color,
        old_color=failed.new_color,
        rollback=True,
        steps=(Step.DELETE_OLD, Step.APPLY_NEW, Step.WAIT_READY, Step.SWITCH_SERVICE),
        reason=(
            f"{failed.new_name} failed and nothing else serves: delete it and apply the last good "
            f"configuration (revision {last_good.config.revision}) again as {workload_name(good_color)}"
        ),
    )
