"""The campaign: one flow that chains the stages, from a spec to a report.

A stage appears here only when it works end to end. Each stage records its timing and outcome in the
report and adds one top-level key to report.json; the report is written even when a stage fails, so
a person always sees how far the campaign got and why it stopped.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from capserve.core.plan_check import plan_markdown
from capserve.core.report import CampaignReport, StageStatus
from capserve.core.spec import CampaignSpec
from capserve.flows.evaluate import evaluate_endpoint
from capserve.flows.stage_weights import stage_weights
from capserve.tasks.planning import plan_campaign, publish_plan, resolve_model
from capserve.tasks.reporting import write_report


@flow(name="campaign", flow_run_name="campaign-{spec.name}")
def campaign(
    spec: CampaignSpec,
    out_dir: Path = Path("out/campaign"),
    staging_dir: Path | None = None,
    hub_endpoint: str | None = None,
    endpoint_url: str | None = None,
    endpoint_note: str | None = None,
) -> dict[str, object]:
    """Run a campaign's stages in order and return report.json's content.

    ``staging_dir`` is where checkpoint files are downloaded and verified (default: under ``out_dir``);
    ``hub_endpoint`` overrides the Hugging Face endpoint. ``endpoint_url`` names the OpenAI-compatible
    endpoint to evaluate when the campaign has not rolled one out itself; ``endpoint_note`` says in the
    report what that endpoint is.
    """
    logger = get_run_logger()
    report = CampaignReport(spec.campaign_id)
    try:
        with report.stage("plan"):
            model = resolve_model(spec.model, hub_endpoint)
            plan = plan_campaign(spec, model)
            publish_plan(plan, spec.campaign_id)
            report.add_section("plan", plan.to_json(), title="Plan", markdown=plan_markdown(plan))
            logger.info(
                "plan: %s on %d × %s, %s (%.1f GiB weights per GPU)",
                plan.model,
                plan.nodes,
                plan.instance_type,
                plan.layout,
                plan.weight_bytes_per_gpu / 1024**3,
            )

        # Weights need no GPU: in a real campaign this stage can run before the reservation starts.
        with report.stage("stage_weights"):
            weights = stage_weights(
                spec,
                nodes=plan.nodes,
                expert_parallel=plan.expert_parallel,
                staging_dir=staging_dir or out_dir / "staging",
                hub_endpoint=hub_endpoint,
            )
            report.add_section("weights", weights.report_section(), title="Weights", markdown=weights.markdown())

        with report.stage("evaluate") as record:
            if endpoint_url is None:
                record.status = StageStatus.SKIPPED
                record.detail = "no endpoint to evaluate: nothing was rolled out and no endpoint_url was given"
            else:
                result = evaluate_endpoint(
                    endpoint_url,
                    spec.served_model_name,
                    spec.evaluation,
                    out_dir=out_dir / "evaluation",
                    notes=[endpoint_note] if endpoint_note else [],
                )
                report.add_section("evaluation", result.report_section(), title=None, markdown=result.markdown())
    finally:
        json_path, md_path = write_report(report.to_json(), report.to_markdown(), out_dir)
        logger.info("report: %s and %s", json_path, md_path)
    return report.to_json()
