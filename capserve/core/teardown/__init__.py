"""Teardown, pure: what exists (inventory) → the ordered deletion plan → what happened (result).

Nothing here talks to AWS or Kubernetes: ``capserve.tasks.teardown`` takes the inventory and runs the
plan, ``capserve.flows.teardown`` / ``capserve.flows.reaper`` put the two together.
"""
