"""The campaign: one flow that chains the stages, from a spec to a report.

    plan ─► acquire ─► stage_weights ─► bring_up ─► weights_to_nodes ─► evaluate ─► (teardown)

A stage appears here only when it works end to end. Each stage records its timing and outcome in the
report and adds its top-level keys to report.json; the report is written even when a stage fails, so
a person always sees how far the campaign got and why it stopped.

Teardown: once bring-up has created anything, a failure anywhere tears the campaign down at once
(reason "failed-stage"). A successful campaign keeps serving until the lease's hard-teardown time,
when the one-off teardown run scheduled right after the purchase fires; ``teardown_when_done`` tears
down as soon as the stages finish instead (the demo and tests: nothing left running).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from capserve.core.errors import CapserveError
from capserve.core.lease import Lease
from capserve.core.plan_check import plan_markdown
from capserve.core.report import CampaignReport
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownIncompleteError, TeardownReason, TeardownResult
from capserve.flows.acquire import acquire
from capserve.flows.bring_up import bring_up
from capserve.flows.evaluate import evaluate_endpoint
from capserve.flows.stage_weights import stage_weights
from capserve.flows.teardown import teardown
from capserve.tasks.planning import plan_campaign, publish_plan, resolve_model
from capserve.tasks.reporting import write_report
from capserve.tasks.scheduling import schedule_teardown
from capserve.tasks.weights.node_staging import stage_on_nodes
from capserve.tasks.weights.s3 import read_manifest

# The stages this campaign runs, in order (rollout and drain join when they exist).
STAGES = (Stage.PLAN, Stage.ACQUIRE, Stage.STAGE_WEIGHTS, Stage.BRING_UP, Stage.WEIGHTS_TO_NODES, Stage.EVALUATE)


def _skip_from(report: CampaignReport, first: Stage, why: str) -> None:
    """Skip ``first`` and every stage of the campaign after it, for one reason."""
    for stage in STAGES:
        if not stage.precedes(first):
            report.skip(stage, why)


@flow(name="campaign", flow_run_name="campaign-{spec.name}")
def campaign(
    spec: CampaignSpec,
    out_dir: Path = Path("out/campaign"),
    staging_dir: Path | None = None,
    hub_endpoint: str | None = None,
    endpoint_url: str | None = None,
    endpoint_note: str | None = None,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    interactive: bool = False,
    teardown_when_done: bool = False,
) -> dict[str, object]:
    """Run a campaign's stages in order and return report.json's content.

    ``staging_dir`` is where checkpoint files are downloaded and verified (default: under ``out_dir``);
    ``hub_endpoint`` overrides the Hugging Face endpoint. ``endpoint_url`` names the OpenAI-compatible
    endpoint to evaluate (until the rollout stage exists, the campaign rolls out none itself);
    ``endpoint_note`` says in the report what that endpoint is; ``api_key_env`` / ``basic_auth_env``
    name the environment variables holding its credentials (never the values). ``interactive`` lets a person at a
    terminal approve a purchase above the threshold.
    """
    logger = get_run_logger()
    report = CampaignReport(spec.campaign_id)
    lease: Lease | None = None
    cluster_started = False
    failed = False
    try:
        with report.stage(Stage.PLAN):
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

        with report.stage(Stage.ACQUIRE) as record:
            obtained = acquire(spec, interactive=interactive)
            sections = obtained.report_sections()
            report.add_section("lease", sections["lease"], title=None, markdown=obtained.markdown())
            report.add_section("offers_considered", sections["offers_considered"], title=None, markdown="")
            if obtained.stopped:
                record.status = StageStatus.STOPPED
                record.detail = obtained.message
        if obtained.lease is None:
            _skip_from(report, Stage.STAGE_WEIGHTS, f"no capacity: {obtained.message}")
            return report.to_json()
        lease = obtained.lease
        report.add_section(
            "teardown_schedule",
            schedule_teardown(spec, lease),
            title="Schedule",
            markdown=_schedule_markdown(lease, spec),
        )

        # Weights need no GPU: this stage runs while the reservation is still scheduled.
        with report.stage(Stage.STAGE_WEIGHTS):
            weights = stage_weights(
                spec,
                nodes=plan.nodes,
                expert_parallel=plan.expert_parallel,
                staging_dir=staging_dir or out_dir / "staging",
                hub_endpoint=hub_endpoint,
            )
            report.add_section("weights", weights.report_section(), title="Weights", markdown=weights.markdown())

        if obtained.state is None or not obtained.state.is_usable:
            why = (
                f"reservation {lease.reservation_id} is {obtained.state.value if obtained.state else 'unknown'} "
                f"until {lease.start.isoformat()}: run the campaign again then (it adopts the reservation and "
                "skips finished work)"
            )
            _skip_from(report, Stage.BRING_UP, why)
            return report.to_json()

        with report.stage(Stage.BRING_UP):
            cluster_started = True
            cluster = bring_up(spec, lease)
            report.add_section("cluster", cluster.report_section(), title="Cluster", markdown=cluster.markdown())

        # Each GPU node copies only its own files from S3 (a Job per node), verifying every sha256.
        with report.stage(Stage.WEIGHTS_TO_NODES):
            manifest = read_manifest(weights.manifest_uri, spec.weights_region)
            staged = stage_on_nodes(spec, cluster, manifest)
            report.add_section(
                "node_staging", staged.report_section(), title="Weights on the nodes", markdown=staged.markdown()
            )

        with report.stage(Stage.EVALUATE) as record:
            if endpoint_url is None:
                record.status = StageStatus.SKIPPED
                record.detail = "no endpoint to evaluate: nothing was rolled out and no endpoint_url was given"
            else:
                result = evaluate_endpoint(
                    endpoint_url,
                    spec.served_model_name,
                    spec.evaluation,
                    out_dir=out_dir / "evaluation",
                    api_key_env=api_key_env,
                    basic_auth_env=basic_auth_env,
                    notes=[endpoint_note] if endpoint_note else [],
                )
                report.add_section("evaluation", result.report_section(), title=None, markdown=result.markdown())
    except BaseException:
        failed = True
        raise
    finally:
        if lease is not None and cluster_started and (failed or teardown_when_done):
            reason: TeardownReason = "failed-stage" if failed else "campaign-finished"
            _tear_down(report, spec, lease, reason, raise_errors=not failed)
        json_path, md_path = write_report(report.to_json(), report.to_markdown(), out_dir)
        logger.info("report: %s and %s", json_path, md_path)
    return report.to_json()


def _tear_down(
    report: CampaignReport, spec: CampaignSpec, lease: Lease, reason: TeardownReason, *, raise_errors: bool
) -> None:
    """Tear the campaign down and record it. While another failure is propagating, a teardown failure
    is recorded and logged but does not replace that first error (the reaper and the scheduled run
    still stand behind it)."""
    try:
        with report.stage(Stage.TEARDOWN):
            try:
                done: TeardownResult = teardown(spec, lease.region, reason=reason)
            except TeardownIncompleteError as exc:
                report.add_section(
                    "teardown", exc.result.report_section(), title="Teardown", markdown=exc.result.markdown()
                )
                raise
            report.add_section("teardown", done.report_section(), title="Teardown", markdown=done.markdown())
    except CapserveError:
        if raise_errors:
            raise
        get_run_logger().exception("teardown after a failed stage did not finish; the reaper will retry")


def _schedule_markdown(lease: Lease, spec: CampaignSpec) -> str:
    return (
        f"Drain at **{lease.drain_at(spec.teardown).isoformat()}**, hard teardown at "
        f"**{lease.teardown_at(spec.teardown).isoformat()}** (AWS terminates instances at "
        f"{lease.end.isoformat()} − 30 min)."
    )
