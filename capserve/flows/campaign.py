"""The campaign: one flow that runs the stages in order, from a spec to a report.

    plan ─► acquire ─► stage_weights ─► stage_image ─► bring_up ─► weights_to_nodes ─► rollout ─► evaluate ─► …
    └──────────────────── PREPARE ─────────────────┘   └────────────────── SERVE ─────────────────────────┘

Each stage is a function in ``capserve.campaign.stages``; the flow is the list of them, run by
``capserve.campaign.runner`` (timing, the report, the campaign record, what to skip and when to tear
down). PREPARE needs no GPU and may run long before the reservation starts; SERVE needs it active.
The report is written even when a stage fails, so a person always sees how far the campaign got.

Teardown: once bring-up has started, a stage that fails on its own merits tears the campaign down at
once ("failed-stage"); an interruption (Ctrl-C, SIGTERM, a cancellation, a lost output pipe) leaves the
cluster to the teardown scheduled at purchase and to the reaper. A successful campaign keeps serving
until the lease's hard-teardown time, when that scheduled run fires; ``teardown_when_done`` tears down
as soon as the stages finish instead (the demo and tests: nothing left running).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.client.schemas.objects import State

from capserve.campaign.context import TERMINAL_APPROVAL, CampaignContext, RunOptions
from capserve.campaign.runner import Step, run_campaign
from capserve.campaign.stages import (
    acquire_stage,
    bring_up_stage,
    evaluate_stage,
    plan_stage,
    rollout_stage,
    stage_image_stage,
    stage_weights_stage,
    teardown_stage,
    weights_to_nodes_stage,
)
from capserve.campaign.states import verdict_state
from capserve.core.report import CampaignReport
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import CampaignPart, Stage
from capserve.tasks.settings import hub_endpoint_from_environment, settings_for
from capserve.tasks.slots import campaign_slot

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
