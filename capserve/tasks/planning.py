"""The plan stage's tasks: find the model's geometry, plan it, and show the plan in the UI."""

from __future__ import annotations

from prefect.artifacts import create_table_artifact

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.catalog.models import ModelEntry
from capserve.core.plan_check import check_plan_against_capacity, check_plan_against_recipe, plan_summary_rows
from capserve.core.planner.plan import ServingPlan, plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.spec import CampaignSpec, ModelRef
from capserve.tasks.model_config import model_from_hub
from capserve.tasks.resilience import hub_task, local_task, orchestrator_task


@hub_task(name="resolve-model")
def resolve_model(ref: ModelRef, hub_endpoint: str | None = None) -> ModelEntry:
    """The model's geometry: the catalog entry, or the repo's own config.json read from the Hub.

    A catalog id wins when both are given (the repo then only says where the weights come from).
    """
    if ref.catalog is not None:
        return get_model(ref.catalog)
    assert ref.repo is not None  # noqa: S101 - the spec guarantees one of the two
    return model_from_hub(ref.repo, ref.revision, endpoint=hub_endpoint)


@local_task(name="plan-serving")
def plan_campaign(spec: CampaignSpec, model: ModelEntry, settings: PlannerSettings | None = None) -> ServingPlan:
    """Plan the model on the spec's instance type; refuse before anything is bought if it cannot fit, or if the
    spec contradicts the model's vLLM recipe or the plan's own arguments."""
    instance = get_instance_type(spec.capacity.instance_type)
    plan = plan_serving(
        model,
        instance,
        context_length=spec.serving.max_model_len,
        concurrency=spec.serving.max_num_seqs,
        settings=settings,
    ).require_fit()
    check_plan_against_capacity(plan, spec)
    check_plan_against_recipe(plan, spec)
    return plan


@orchestrator_task(name="publish-plan")
def publish_plan(plan: ServingPlan, campaign_id: str) -> None:
    create_table_artifact(
        key=f"{campaign_id}-plan",
        table=[{"what": what, "value": value} for what, value in plan_summary_rows(plan)],
        description=f"Serving plan: {plan.model} on {plan.nodes} × {plan.instance_type} ({plan.layout})",
    )
