"""The plan stage's tasks: find the model's geometry, plan it, and show the plan in the UI."""

from __future__ import annotations

import json
from pathlib import Path

from prefect.artifacts import create_table_artifact

from capserve.core.catalog import ModelEntry, get_instance_type, get_model, model_from_hf_config
from capserve.core.errors import PermanentError, RetryableError
from capserve.core.plan_check import check_plan_against_capacity, plan_summary_rows
from capserve.core.planner import PlannerSettings, ServingPlan, plan_serving
from capserve.core.spec import CampaignSpec, ModelRef
from capserve.tasks.resilience import hub_task, local_task, orchestrator_task


def model_from_hub(repo: str, revision: str = "main", *, endpoint: str | None = None) -> ModelEntry:
    """The model's geometry read from its own config.json on the Hub (or a Hub-compatible endpoint)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        path = hf_hub_download(repo, "config.json", revision=revision, endpoint=endpoint)
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        failure = RetryableError if status is None or status >= 500 or status == 429 else PermanentError
        raise failure(
            f"cannot read config.json of {repo}@{revision} from the Hub (HTTP {status}): check model.repo and "
            "model.revision (and the Hub token for gated repos), or name a catalog model with model.catalog"
        ) from exc
    return model_from_config_file(Path(path), name=repo, hf_repo=repo, source=f"{repo}@{revision} config.json")


def model_from_config_file(
    path: Path, *, name: str, hf_repo: str | None = None, source: str | None = None
) -> ModelEntry:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PermanentError(f"{path}: not a readable config.json ({exc})") from exc
    return model_from_hf_config(config, name=name, hf_repo=hf_repo, source=source or str(path))


@hub_task(name="resolve-model")
def resolve_model(ref: ModelRef, hub_endpoint: str | None = None) -> ModelEntry:
    """The model's geometry: the catalog entry, or the repo's own config.json read from the Hub.

    A catalog id wins when both are given (the repo then only says where the weights come from).
    """
    if ref.catalog is not None:
        return get_model(ref.catalog)
    assert ref.repo is not None  # the spec guarantees one of the two
    return model_from_hub(ref.repo, ref.revision, endpoint=hub_endpoint)


@local_task(name="plan-serving")
def plan_campaign(spec: CampaignSpec, model: ModelEntry, settings: PlannerSettings | None = None) -> ServingPlan:
    """Plan the model on the spec's instance type; refuse before anything is bought if it cannot fit."""
    instance = get_instance_type(spec.capacity.instance_type)
    plan = plan_serving(
        model,
        instance,
        context_length=spec.serving.max_model_len,
        concurrency=spec.serving.max_num_seqs,
        settings=settings,
    ).require_fit()
    check_plan_against_capacity(plan, spec)
    return plan


@orchestrator_task(name="publish-plan")
def publish_plan(plan: ServingPlan, campaign_id: str) -> None:
    create_table_artifact(
        key=f"{campaign_id}-plan",
        table=[{"what": what, "value": value} for what, value in plan_summary_rows(plan)],
        description=f"Serving plan: {plan.model} on {plan.nodes} × {plan.instance_type} ({plan.layout})",
    )
