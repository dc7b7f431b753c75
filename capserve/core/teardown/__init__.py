"""Teardown, pure: what exists (inventory) → the ordered deletion plan → what happened (result).

Nothing here talks to AWS or Kubernetes: ``capserve.tasks.teardown`` takes the inventory and runs the
plan, ``capserve.flows.teardown`` / ``capserve.flows.reaper`` put the two together.
"""

from capserve.core.teardown.inventory import Inventory
from capserve.core.teardown.plan import Phase, Step, TeardownPlan, plan_teardown
from capserve.core.teardown.result import KeptResource, TeardownIncompleteError, TeardownReason, TeardownResult
from capserve.core.teardown.settings import ReaperSettings, TeardownSettings

__all__ = [
    "Inventory",
    "KeptResource",
    "Phase",
    "ReaperSettings",
    "Step",
    "TeardownIncompleteError",
    "TeardownPlan",
    "TeardownReason",
    "TeardownResult",
    "TeardownSettings",
    "plan_teardown",
]
