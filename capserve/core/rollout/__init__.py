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
