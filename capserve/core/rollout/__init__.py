"""The serving workload, rendered as pure functions of the plan, the spec and where the weights are.

How the pieces fit (each module's docstring says why it is built the way it is; facts and their
public sources are in docs/serving.md):

1. ``rollout_config(plan, spec, model_repo=…, revision_sha=…, node_bytes=…, splits_experts=…)`` →
   ``RolloutConfig``: what to serve (image, model revision, layout, engine options, endpoint access,
   caching). The campaign record keeps the last good one; its ``revision`` and ``cache_key`` name it.
2. ``choose_strategy(serving_now, config, nodes_available=…)`` → ``RolloutDecision``: initial,
   blue/green or recreate, the colour to render and the ordered steps. ``rollback_decision``
   undoes a failed one.
3. ``render_rollout(config, RolloutTarget(campaign_id, color, placement, …))`` →
   ``RenderedRollout``: the LeaderWorkerSet and the Services, the leader's and workers' arguments,
   the startup budget, the compile-cache key and S3 folder. ``placement_from_staging`` turns the
   weights_to_nodes result into the placement.
4. ``api_key_secret(namespace, campaign_id, key)``: the Secret to apply first (never written to disk:
   ``redact_for_disk`` makes any manifest safe to write).
5. After the workload is ready: ``render_cache_save_job`` per pod's node; ``cache_outcome`` reads the
   prepare container's log (hit / miss / off).

``launch_blockers`` tells at planning time whether a layout can be rolled out at all;
``command.serve_command_problems`` tells preflight whether vLLM would accept the pods' command lines.
"""

from capserve.core.rollout.args import EngineOptions, merge_extra_args, vllm_args
from capserve.core.rollout.cache import cache_outcome, cache_uri, render_cache_save_job
from capserve.core.rollout.config import RolloutConfig, engine_options, rollout_config
from capserve.core.rollout.layout import LaunchMode, launch_blockers, launch_mode
from capserve.core.rollout.names import Color, other_color, serving_namespace, workload_name
from capserve.core.rollout.probes import engine_ready_timeout_s, startup_budget_s
from capserve.core.rollout.secret import api_key_secret, redact_for_disk
from capserve.core.rollout.service import endpoint_services
from capserve.core.rollout.settings import RolloutSettings, StartupModel
from capserve.core.rollout.strategy import (
    RolloutDecision,
    Serving,
    Step,
    choose_strategy,
    rollback_decision,
)
from capserve.core.rollout.workload import (
    RenderedRollout,
    RolloutTarget,
    placement_from_staging,
    render_rollout,
)

__all__ = [
    "Color",
    "EngineOptions",
    "LaunchMode",
    "RenderedRollout",
    "RolloutConfig",
    "RolloutDecision",
    "RolloutSettings",
    "RolloutTarget",
    "Serving",
    "StartupModel",
    "Step",
    "api_key_secret",
    "cache_outcome",
    "cache_uri",
    "choose_strategy",
    "endpoint_services",
    "engine_options",
    "engine_ready_timeout_s",
    "launch_blockers",
    "launch_mode",
    "merge_extra_args",
    "other_color",
    "placement_from_staging",
    "redact_for_disk",
    "render_cache_save_job",
    "render_rollout",
    "rollback_decision",
    "rollout_config",
    "serving_namespace",
    "startup_budget_s",
    "vllm_args",
    "workload_name",
]
