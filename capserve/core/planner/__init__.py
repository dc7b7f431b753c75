"""The memory-fit planner (pure): model x instance type x (context, concurrency) -> layout and KV budget.

``plan_serving`` returns a ServingPlan; when nothing fits it returns ``fits=False`` with the reason
and what would fit instead rather than raising. ``ServingPlan.require_fit()`` raises DoesNotFitError.
Bad input (a context above the model's maximum, concurrency below 1, GPUs that cannot hold the
dense weights) raises SpecError. docs/planner.md explains every rule and default.
"""
