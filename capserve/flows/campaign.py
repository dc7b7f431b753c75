"""The campaign: one flow that runs the stages in order, from a spec to a report.

    plan ─► acquire ─► stage_weights ─► stage_image ─► bring_up ─► weights_to_nodes ─► rollout ─► evaluate ─► …
    └──────────────────── PREPARE ─────────────────┘   └────────────────── SERVE ─────────────────────────┘

Each stage is a small function of the ``CampaignContext`` below that returns its typed result (or ``StageEnd``
when it ends without it), reading earlier stages' results from the report's sections and its knobs from
``ctx.settings``; it talks to the outside world only through tasks and subflows. The flow hands the list of
them to the engine, ``capserve.campaign.runner`` (timing, the report, the campaign record, what to skip and
when to tear down), which imports no flow. PREPARE needs no GPU and may run long before the reservation
starts; SERVE needs it active. The SERVE stages' subflows (bring-up, rollout, evaluation) and teardown are
imported when their stage runs: a campaign run that ends at PREPARE, days before its block, neither imports
them nor makes their parameter schemas (about 0.6 CPU s of its process). The report is written even when a stage
fails, so a person always sees how far the campaign got.

Teardown: once bring-up has started, a stage that fails on its own merits tears the campaign down at
once ("failed-stage"); an interruption (Ctrl-C, SIGTERM, a cancellation, a lost output pipe) leaves the
cluster to the teardown scheduled at purchase and to the reaper. A successful campaign keeps serving
until the lease's hard-teardown time, when that scheduled run fires; ``teardown_when_done`` tears down
as soon as the stages finish instead (the demo and tests: nothing left running).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State

from capserve.campaign.announce import about, announce, now, recorded, watch_capacity_events
from capserve.campaign.context import TERMINAL_APPROVAL, CampaignContext, RunOptions, need
from capserve.campaign.runner import StageEnd, StageOutput, Step, run_campaign
from capserve.campaign.states import verdict_state
from capserve.core.capacity.result import AcquireResult
from capserve.core.catalog import get_instance_type
from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.models import Thinking
from capserve.core.cluster.efa import layout_shortfall
from capserve.core.cluster.result import ClusterResult
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.events import (
    capacity_obtained,
    cluster_ready,
    evaluation_done,
    rollout_event,
    teardown_finished,
    weights_staged,
)
from capserve.core.locations import default_records_bucket, home_region
from capserve.core.permissions import cluster_access_problem, permission_problem
from capserve.core.planner.plan import ServingPlan
from capserve.core.preflight import check_preflight
from capserve.core.report import CampaignReport
from capserve.core.rollout.efa_image import efa_stack_problem
from capserve.core.rollout.image import ImageMirrorResult
from capserve.core.rollout.result import RolloutFailedError, RolloutResult
from capserve.core.schedule import LeaseSchedule, cluster_lead, stages_no_longer_needed
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import CampaignPart, Stage, StageStatus
from capserve.core.teardown.result import TeardownIncompleteError, TeardownReason, TeardownResult
from capserve.core.weights.node_staging import NodeStagingResult
from capserve.core.weights.result import WeightsResult
from capserve.flows.acquire import acquire
from capserve.flows.stage_weights import stage_weights
from capserve.tasks.cluster.hyperpod import lifecycle_problem
from capserve.tasks.image_mirror import image_efa_stack, mirror_image, resolve_image_digest
from capserve.tasks.permissions import check_permissions
from capserve.tasks.planning import plan_campaign, publish_plan, resolve_model
from capserve.tasks.preflight import PreflightInputs, gather_facts, network_facts
from capserve.tasks.rollout.prepull import start_image_prepull
from capserve.tasks.scheduling import schedule_lease_runs
from capserve.tasks.settings import hub_endpoint_from_environment, settings_for
from capserve.tasks.slots import campaign_slot
from capserve.tasks.the_clock import clock
from capserve.tasks.weights.node_staging import stage_on_nodes
from capserve.tasks.weights.s3 import read_manifest

if TYPE_CHECKING:
    from capserve.campaign.rollout import RolloutInputs


def plan_stage(ctx: CampaignContext) -> ServingPlan:
    """Model × instance type × context → nodes and parallelism; refuses what cannot fit before anything is bought."""
    model = resolve_model(ctx.spec.model, ctx.options.hub_endpoint)
    plan = plan_campaign(ctx.spec, model, ctx.settings.planner)
    publish_plan(plan, ctx.spec.campaign_id)
    get_run_logger().info(
        "plan: %s on %d × %s, %s (%.1f GiB weights per GPU)",
        plan.model,
        plan.nodes,
        plan.instance_type,
        plan.layout,
        plan.weight_bytes_per_gpu / 1024**3,
    )
    preflight(ctx, plan)
    return plan


def preflight(ctx: CampaignContext, plan: ServingPlan) -> None:
    """Everything checkable without spending, before acquire creates or buys anything: one error listing every
    problem (``capserve.core.preflight``), or nothing."""
    options, records = ctx.options, ctx.settings.records
    inputs = PreflightInputs(
        out_dir=options.out_dir,
        staging_dir=options.staging_dir,
        endpoint_url=options.endpoint_url,
        hub_endpoint=options.hub_endpoint,
        credential_variables=tuple(n for n in (options.api_key_env, options.basic_auth_env) if n),
        hub_timeout_seconds=ctx.settings.weights.hub_timeout_seconds,
    )
    # The default records bucket is named after the account (12 digits): its length is known without asking.
    records_bucket = records.bucket or default_records_bucket("0" * 12, home_region(ctx.spec, records))
    rehearsal = ctx.lease is not None and ctx.lease.on_demand  # its instances count against on-demand vCPUs
    facts = gather_facts(ctx.spec, inputs, bucket_names=(ctx.spec.weights.s3_bucket, records_bucket),
                         on_demand=rehearsal)
    if ctx.spec.cluster.kind == "hyperpod" and not ctx.spec.cluster.existing_cluster_name:
        # The lifecycle script must be in S3 before CreateCluster, which runs on the bought plan: check now.
        problem = lifecycle_problem(ctx.spec.campaign_id, ctx.spec.capacity.regions[0], ctx.settings.bring_up)
        facts = facts.model_copy(update={"lifecycle_problem": problem})
    # Every AWS call the campaign will make, put to IAM's policy simulator for the caller: an AccessDenied after
    # the purchase would strand a block that cannot be cancelled (docs/iam/README.md).
    permissions = check_permissions(
        ctx.spec, ctx.spec.capacity.regions[0], records_bucket=records.bucket,
        home_region=home_region(ctx.spec, records),
    )
    if permissions.skipped:
        get_run_logger().warning("preflight: AWS permissions not simulated: %s", permissions.skipped)
    facts = facts.model_copy(update={"permission_problem": permission_problem(permissions),
                                     "cluster_access_problem": cluster_access_problem(permissions)})
    if plan.parallel.nodes_per_replica > 1 and ctx.spec.cluster.kind == "eks":
        # The launch template's EFA interfaces, from what EC2 says of the type now (docs/aws-network.md §2.1).
        facts = facts.model_copy(update={"efa_layout_problem": layout_shortfall(
            network_facts(ctx.spec.capacity.regions[0], plan.instance_type),
            get_instance_type(plan.instance_type), plan.parallel.nodes_per_replica,
        )})
    if plan.parallel.nodes_per_replica > 1:
        # NCCL across nodes needs aws-ofi-nccl and libfabric in the image: read from its files, before buying.
        found = image_efa_stack(ctx.spec.serving.image, ctx.settings.rollout)
        facts = facts.model_copy(update={"efa_image_problem": efa_stack_problem(ctx.spec.serving.image, found)})
    check_preflight(ctx.spec, plan, facts, bring_up=ctx.settings.bring_up)
    if ctx.spec.serving.image_mirror == "ecr":
        # The tag must exist upstream before a block is bought for it (the copy itself needs the lease's region).
        digest = resolve_image_digest(ctx.spec.serving.image, ctx.settings.rollout)
        get_run_logger().info("preflight: %s is %s (copied into the block's region after acquire)",
                              ctx.spec.serving.image, digest)
    get_run_logger().info("preflight: every check passed for campaign %s", ctx.spec.campaign_id)


def acquire_stage(ctx: CampaignContext) -> StageOutput:
    """Buy (exactly once) or adopt the capacity; schedule the lease's runs (prepare-cluster, serve, drain, teardown)
    the moment a lease exists."""
    # The acquire flow's body runs in the campaign run itself, not as a subflow: a purchase that needs approval
    # suspends the campaign run (the process is freed; Prefect refuses to suspend a subflow, docs/prefect.md §6),
    # and the resumed run comes back here with the answer (its approval is keyed by the offering).
    obtained: AcquireResult = acquire.fn(
        ctx.spec, interactive=ctx.options.interactive, settings=ctx.settings.capacity, record=ctx.record_ref,
        bound=ctx.options.bound_lease,
    )
    if obtained.lease is None:
        ctx.no_capacity = obtained.message
        return StageEnd(StageStatus.STOPPED, obtained.message, obtained)
    ctx.lease, ctx.reservation_state = obtained.lease, obtained.state
    announce(ctx, capacity_obtained(about(ctx), obtained, occurred=now()))
    watch_capacity_events(ctx)
    ctx.report.add(schedule_window(ctx))
    return obtained


def schedule_window(ctx: CampaignContext, *, served: bool = False, torn_down: bool = False) -> LeaseSchedule:
    """The lease's scheduled runs, reconciled with what the Prefect server holds (capserve.core.schedule)."""
    lease = need(ctx.lease, Stage.ACQUIRE)
    return schedule_lease_runs(
        ctx.spec.campaign_id,
        lease,
        ctx.spec.teardown,
        bring_up_lead=timedelta(minutes=ctx.spec.teardown.bring_up_lead_minutes),
        prepare_lead=cluster_lead(ctx.spec),
        no_longer_needed=stages_no_longer_needed(torn_down=torn_down, served=served),
        fired=ctx.record.fired,
    )


def stage_weights_stage(ctx: CampaignContext) -> WeightsResult:
    """Weights need no GPU: this runs while the reservation may still be scheduled."""
    plan = need(ctx.report.plan, Stage.PLAN)
    staged = stage_weights(
        ctx.spec,
        nodes=plan.nodes,
        expert_parallel=plan.expert_parallel,
        staging_dir=ctx.options.staging_dir,
        hub_endpoint=ctx.options.hub_endpoint,
        settings=ctx.settings.weights,
        bucket=ctx.locations.weights,
    )
    announce(ctx, weights_staged(about(ctx), staged, occurred=now()))
    return staged


def stage_image_stage(ctx: CampaignContext) -> ImageMirrorResult | StageEnd:
    """The serving image into the campaign's ECR repository in the block's region, by digest, before the block:
    the nodes then pull it in-region, not from Docker Hub through the NAT under its rate limit."""
    if ctx.spec.serving.image_mirror == "none":
        return StageEnd(StageStatus.SKIPPED, "serving.image_mirror is none: the nodes pull serving.image as given")
    lease = need(ctx.lease, Stage.ACQUIRE)
    return mirror_image(ctx.spec.campaign_id, ctx.spec.serving.image, lease.region, ctx.settings.rollout)


def bring_up_stage(ctx: CampaignContext) -> ClusterResult:
    """The cluster on the active block; once it is up, the scheduled bring-up run is no longer needed."""
    cluster = cluster_on_lease(ctx)
    announce(ctx, cluster_ready(about(ctx), cluster, occurred=now()))
    ctx.report.schedule = schedule_window(ctx, served=True)
    return cluster


def cluster_on_lease(ctx: CampaignContext) -> ClusterResult:
    """The campaign's cluster on its lease, made or found, and proven usable, by bring-up (a redeploy's only finds)."""
    from capserve.flows.bring_up import bring_up

    plan = ctx.report.plan  # absent: bring-up assumes the widest layout the lease holds (EFA on)
    return bring_up(
        ctx.spec, need(ctx.lease, Stage.ACQUIRE), ctx.settings.bring_up,
        nodes_per_replica=plan.parallel.nodes_per_replica if plan else None,
    )


def weights_to_nodes_stage(ctx: CampaignContext) -> NodeStagingResult:
    """Each GPU node copies only its own files from S3 (a Job per node), verifying every sha256."""
    weights = need(ctx.report.weights, Stage.STAGE_WEIGHTS)
    manifest = read_manifest(weights.manifest_uri, ctx.locations.weights.region)
    cluster = need(ctx.report.cluster, Stage.BRING_UP)
    if ctx.report.image is not None:
        # The image is pulled meanwhile, off the rollout's path (capserve.core.rollout.prepull).
        started = start_image_prepull(cluster, ctx.spec.campaign_id, ctx.report.image.image, ctx.settings.rollout)
        get_run_logger().info("image: pre-pulling on %d GPU node(s) while the weights are copied", started)
    return stage_on_nodes(ctx.spec, cluster, manifest, ctx.settings.weights, ctx.settings.bring_up.kube)


def rollout_stage(ctx: CampaignContext) -> RolloutResult | StageEnd:
    """Serve the plan with vLLM on the cluster (or converge on it); a failure rolls back or raises (→ teardown)."""
    from capserve.flows.rollout import roll_out

    inputs = rollout_inputs(ctx)
    tried = inputs.weights.revision_sha
    try:
        result, serving = roll_out(inputs)
    except RolloutFailedError as exc:
        failed_event = rollout_event(
            about(ctx), "failed", revision=tried, strategy=None, occurred=now(), detail=str(exc)
        )
        announce(ctx, failed_event)
        raise
    ctx.save(lambda record: record.with_rollout(serving))
    if result.rolled_back:
        failed = "; ".join(a.failure or "" for a in result.failed)
        back = rollout_event(
            about(ctx),
            "rolled-back",
            revision=tried,
            strategy=result.strategy,
            occurred=now(),
            detail=failed,
            rolled_back_to=serving.config.revision_sha,
        )
        announce(ctx, back)
        return StageEnd(StageStatus.STOPPED, f"rolled back to revision {result.revision}: {failed}", result)
    announce(ctx, rollout_event(about(ctx), "ready", revision=tried, strategy=result.strategy, occurred=now()))
    return result


def rollout_inputs(ctx: CampaignContext) -> RolloutInputs:
    """What the rollout is given: the earlier stages' results and the record's last good configuration."""
    from capserve.campaign.rollout import RolloutInputs

    cluster = need(ctx.report.cluster, Stage.BRING_UP)
    return RolloutInputs(
        spec=ctx.spec,
        plan=need(ctx.report.plan, Stage.PLAN),
        weights=need(ctx.report.weights, Stage.STAGE_WEIGHTS),
        staged=need(ctx.report.node_staging, Stage.WEIGHTS_TO_NODES),
        cluster=cluster,
        last_good=ctx.record.last_good_rollout,
        region=ctx.locations.weights.region,
        # The vLLM pods mount the weights (and caches) where the staging Jobs wrote them: the kind's NVMe.
        weights_settings=ctx.settings.weights.for_cluster(cluster.kind),
        image=ctx.report.image,
        rollout=ctx.settings.rollout,
        wait=ctx.settings.rollout_wait,
        kube=ctx.settings.bring_up.kube,
    )


def evaluate_stage(ctx: CampaignContext) -> EvaluationResult | StageEnd:
    """The gate before traffic (smoke and quality, within ``evaluation.gate_budget_minutes``) on the rolled-out
    endpoint through a port-forward (or the endpoint_url given instead). The load profile is not part of it: it
    runs on demand against the serving endpoint (``capserve eval --profile load``, docs/evaluation.md §8)."""
    rolled = ctx.report.rollout
    if ctx.options.endpoint_url is None and rolled is not None:
        from capserve.flows.rollout import served_endpoint

        cluster = need(ctx.report.cluster, Stage.BRING_UP)
        port, kube = ctx.settings.rollout.port, ctx.settings.bring_up.kube
        with served_endpoint(cluster, rolled, ctx.spec.campaign_id, port, kube) as (local_url, key_env):
            notes = [f"Endpoint: {rolled.endpoint_note}", f"Server: {rolled.server}."]
            return _evaluate(ctx, local_url, key_env, None, notes)
    given = ctx.options.endpoint_url
    if given is None:
        why = "no endpoint to evaluate: nothing was rolled out and no endpoint_url was given"
        return StageEnd(StageStatus.SKIPPED, why)
    note = ctx.options.endpoint_note
    return _evaluate(ctx, given, ctx.options.api_key_env, ctx.options.basic_auth_env, [note] if note else [])


LOAD_ON_DEMAND = (
    "The gate before traffic is smoke and quality; the load profile is not part of it: run it against the serving "
    "endpoint with `capserve eval --profile load` (docs/evaluation.md §8)."
)


def _evaluate(
    ctx: CampaignContext, url: str, api_key_env: str | None, basic_auth_env: str | None, notes: list[str]
) -> EvaluationResult:
    from capserve.flows.evaluate import GATE_PROFILES, evaluate_endpoint

    result = evaluate_endpoint(
        url,
        ctx.spec.served_model_name,
        ctx.spec.evaluation,
        profiles=GATE_PROFILES,
        out_dir=ctx.options.out_dir / "evaluation",
        api_key_env=api_key_env,
        basic_auth_env=basic_auth_env,
        notes=[*notes, LOAD_ON_DEMAND],
        thinking=_catalog_thinking(ctx),
        campaign=ctx.spec.campaign_id,
    )
    announce(ctx, evaluation_done(about(ctx), result, occurred=now()))
    return result


def _catalog_thinking(ctx: CampaignContext) -> Thinking | None:
    """How the catalog says the served model thinks (None: a model outside the catalog, or one that does not)."""
    name = ctx.spec.model.catalog
    return MODELS[name].thinking if name is not None and name in MODELS else None


def teardown_stage(ctx: CampaignContext, reason: TeardownReason) -> TeardownResult:
    """Delete everything of the campaign in the lease's region; what is kept goes into the record."""
    from capserve.flows.teardown import teardown

    lease = need(ctx.lease, Stage.ACQUIRE)
    try:
        done = teardown(ctx.spec, lease.region, reason=reason, settings=ctx.settings.teardown, refs=about(ctx))
    except TeardownIncompleteError as exc:
        ctx.report.add(exc.result)  # what was deleted and what is still there, before the error
        recorded(ctx, teardown_finished(about(ctx), exc.result, complete=False))
        raise
    recorded(ctx, teardown_finished(about(ctx), done, complete=True))
    ctx.save(lambda record: record.with_kept(done.kept, now=clock().now()))
    if not done.dry_run:
        ctx.report.schedule = schedule_window(ctx, torn_down=True)  # nothing left to serve, drain or tear down
    return done


PREPARE: tuple[Step, ...] = (
    Step(Stage.PLAN, plan_stage),
    Step(Stage.ACQUIRE, acquire_stage),
    Step(Stage.STAGE_WEIGHTS, stage_weights_stage),
    Step(Stage.STAGE_IMAGE, stage_image_stage),
)
SERVE: tuple[Step, ...] = (
    Step(Stage.BRING_UP, bring_up_stage),
    Step(Stage.WEIGHTS_TO_NODES, weights_to_nodes_stage),
    Step(Stage.ROLLOUT, rollout_stage),
    Step(Stage.EVALUATE, evaluate_stage),
)
CAMPAIGN: tuple[Step, ...] = PREPARE + SERVE

assert all(step.stage.part is CampaignPart.PREPARE for step in PREPARE)  # noqa: S101 - checks this module's own tables on import
assert all(step.stage.part is CampaignPart.SERVE for step in SERVE)  # noqa: S101 - checks this module's own tables on import
assert all(a.stage.precedes(b.stage) for a, b in zip(CAMPAIGN, CAMPAIGN[1:], strict=False))  # noqa: S101 - checks this module's own tables on import


@flow(name="campaign", flow_run_name="campaign-{spec.name}")
def campaign(
    spec: CampaignSpec,
    out_dir: Path | None = None,
    staging_dir: Path | None = None,
    hub_endpoint: str | None = None,
    endpoint_url: str | None = None,
    endpoint_note: str | None = None,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    teardown_when_done: bool = False,
    settings: Settings | None = None,
) -> CampaignReport | State:
    """Run a campaign's stages in order and return its report (also written to ``out_dir``, by default
    ``out/<campaign>`` under the worker's folder, as ``capserve up``'s: campaigns started from the UI side by side
    each keep their own report and staging folder).

    ``staging_dir`` is where checkpoint files are downloaded and verified (default: under ``out_dir``);
    ``hub_endpoint`` overrides the Hugging Face endpoint (unset: the worker's ``CAPSERVE_HUB_ENDPOINT``, as for
    the scheduled runs, then huggingface.co). ``endpoint_url`` names an OpenAI-compatible
    endpoint to evaluate instead of the one the rollout stage serves;
    ``endpoint_note`` says in the report what that endpoint is; ``api_key_env`` / ``basic_auth_env``
    name the environment variables holding its credentials (never the values). A purchase above the threshold
    suspends the run until a person answers in the UI (at a terminal, ``capserve up --in-process`` asks there:
    ``TERMINAL_APPROVAL``). ``settings`` default to the environment's
    (``CAPSERVE_…``); the spec's ``settings:`` block goes on top.
    """
    out_dir = out_dir or Path("out") / spec.campaign_id
    options = RunOptions(
        out_dir=out_dir,
        staging_dir=staging_dir or out_dir / "staging",
        hub_endpoint=hub_endpoint or hub_endpoint_from_environment(),
        endpoint_url=endpoint_url,
        endpoint_note=endpoint_note,
        api_key_env=api_key_env,
        basic_auth_env=basic_auth_env,
        interactive=TERMINAL_APPROVAL.get(),
        teardown_when_done=teardown_when_done,
    )
    ctx = CampaignContext.start(spec, settings_for(spec, settings), options)
    with campaign_slot(spec.campaign_id, ctx.settings.slots):  # run_campaign records every applied object
        run_campaign(ctx, CAMPAIGN, teardown_stage)
    return verdict_state(ctx.report)
