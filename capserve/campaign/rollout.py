"""One rollout as the rollout and rollback flows drive it: render the plan, run the strategy's steps in order
(apply, wait for the pods, keep the measured start, save the compile caches, switch the Services), and say what
served.

``RolloutRun`` is the engine's sequencing of a flow's attempts against one cluster: each step is a task
(``capserve.tasks.rollout``), and every decision, the strategy included, is core's (``capserve.core.rollout``).
The flows (``capserve/flows/rollout.py``) only choose which attempt to make and what to roll back to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prefect import get_run_logger

from capserve.core.cluster.result import ClusterResult
from capserve.core.cluster.settings import KubeSettings
from capserve.core.planner.plan import ServingPlan
from capserve.core.record import RolloutRecord
from capserve.core.rollout.config import RolloutConfig, rollout_config
from capserve.core.rollout.diagnosis import Diagnosis, Trouble, transport_diagnosis
from capserve.core.rollout.image import ImageMirrorResult, ImagePull
from capserve.core.rollout.result import (
    Attempt,
    RolloutFailedError,
    RolloutResult,
    StartupComparison,
    server_from_log,
)
from capserve.core.rollout.settings import RolloutSettings, RolloutWaitSettings
from capserve.core.rollout.start_history import MeasuredStart, StartHistory, history_uri, shape_key
from capserve.core.rollout.startup_log import engine_startup_from_log
from capserve.core.rollout.strategy import RolloutDecision, Serving, Step, choose_strategy
from capserve.core.rollout.workload import RenderedRollout, RolloutTarget, placement_from_staging, render_rollout
from capserve.core.spec import CampaignSpec
from capserve.core.weights.node_staging import NodeStagingResult
from capserve.core.weights.result import WeightsResult
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.rollout.access import (
    PORT_FORWARD_NOTE,
    check_endpoint,
    port_forward,
)
from capserve.tasks.rollout.cache import cache_complete, pod_cache_outcome, save_caches
from capserve.tasks.rollout.objects import apply_objects, delete_workload, ensure_api_key, serving_workloads
from capserve.tasks.rollout.start_history import read_start_history, write_start_history
from capserve.tasks.rollout.wait import image_pull_of, log_tail, pod_log, wait_rollout_ready
from capserve.tasks.the_clock import clock


@dataclass(frozen=True)
class RolloutInputs:
    """What the rollout is given by the stages before it."""

    spec: CampaignSpec
    plan: ServingPlan
    weights: WeightsResult
    staged: NodeStagingResult
    cluster: ClusterResult
    last_good: RolloutRecord | None
    region: str  # the weights bucket's region (compile caches live beside the weights)
    weights_settings: WeightsSettings = field(default_factory=WeightsSettings)
    image: ImageMirrorResult | None = None  # the image stage's ECR copy (None: pull serving.image as given)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    wait: RolloutWaitSettings = field(default_factory=RolloutWaitSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)

    def config(self) -> RolloutConfig:
        plan = self.plan
        return rollout_config(
            plan,
            self.spec,
            model_repo=self.weights.repo,
            revision_sha=self.weights.revision_sha,
            # The plan's bytes per node, as preflight and `capserve plan` predict with: against the sandbox the staged
            # files are a small stand-in for the model the plan is for, and the start it plays is that model's.
            node_bytes=plan.node_bytes,
            splits_experts=plan.nodes > 1 and plan.expert_parallel > 1,
            image=self.image.image if self.image else None,
            model_config_digest=self.weights.config_digest,
        )


@dataclass
class Outcome:
    """What one attempt left behind (the result is built from the last good one)."""

    rendered: RenderedRollout
    ready_after_s: float | None
    cache: str
    saved: int
    api_calls: int
    server: str
    pods: list[dict[str, Any]] = field(default_factory=list)
    # The compile-cache save after the switch: not-needed (a hit, or caching off), saved or failed (with why).
    cache_save: str = "not-needed"
    cache_save_detail: str | None = None
    image_pull: ImagePull | None = None
    startup: StartupComparison | None = None
    ready_at: datetime | None = None


@dataclass
class RolloutRun:
    inputs: RolloutInputs
    api: Any  # the Kubernetes ApiClient (flows import no SDK)
    namespace: str
    attempts: list[Attempt] = field(default_factory=list)

    def render(self, config: RolloutConfig, decision: RolloutDecision) -> RenderedRollout:
        settings, weights = self.inputs.rollout, self.inputs.weights_settings
        uri_probe = render_rollout(config, self._target(decision, warm=False), settings=settings, weights=weights)
        nodes = config.layout.nodes_per_replica
        warm = config.compile_cache and cache_complete(uri_probe.cache_uri, nodes, self.inputs.region)
        measured = self.past_starts(config).for_start(warm=warm)
        target = self._target(decision, warm=warm, measured=measured)
        return render_rollout(config, target, settings=settings, weights=weights)

    def _target(
        self, decision: RolloutDecision, *, warm: bool, measured: MeasuredStart | None = None
    ) -> RolloutTarget:
        spec = self.inputs.spec
        return RolloutTarget(
            campaign_id=spec.campaign_id,
            color=decision.new_color,
            placement=placement_from_staging(self.inputs.staged),
            node_target=spec.weights.node_target,
            bucket=spec.weights.s3_bucket,
            prefix=spec.weights.s3_prefix,
            cache_warm=warm,
            measured_start=measured,
        )

    def _history_uri(self, config: RolloutConfig) -> str:
        weights = self.inputs.spec.weights
        return history_uri(weights.s3_bucket, weights.s3_prefix, shape_key(config, weights.node_target))

    def past_starts(self, config: RolloutConfig) -> StartHistory:
        """The measured starts of this server shape; none when they cannot be read (the time model predicts)."""
        try:
            return read_start_history(self._history_uri(config), self.inputs.region)
        except Exception as exc:  # noqa: BLE001 - a prediction's source must not stop the rollout
            get_run_logger().warning("the measured vLLM starts could not be read (%s): the time model predicts",
                                     f"{type(exc).__name__}: {exc}"[:500])
            return StartHistory()

    def keep_start(self, config: RolloutConfig, rendered: RenderedRollout, outcome: Outcome) -> None:
        """Keep the start vLLM's log measured, for the next rollout of this shape; never raises."""
        measured = outcome.startup.measured.to_listening_s if outcome.startup is not None else None
        if measured is None or outcome.cache not in ("hit", "miss", "off"):
            return  # the log did not tell the start, or which start it was (cold or warm) is not known
        warm = outcome.cache == "hit"
        start = MeasuredStart(to_listening_s=measured, measured_at=clock().now(),
                              campaign_id=self.inputs.spec.campaign_id, revision_sha=config.revision_sha)
        try:
            history = self.past_starts(config).with_start(start, warm=warm)
            write_start_history(self._history_uri(config), self.inputs.region, history)
        except Exception as exc:  # noqa: BLE001 - the server is ready: a lost measurement is only a warning
            get_run_logger().warning("rollout %s: its measured start (%.0f s) was not kept (%s)", rendered.name,
                                     measured, f"{type(exc).__name__}: {exc}"[:500])

    def attempt(self, config: RolloutConfig, decision: RolloutDecision) -> Outcome:
        """Run ``decision``'s steps for ``config``; the attempt is recorded either way."""
        rendered = self.render(config, decision)
        try:
            outcome = self.steps(config, decision, rendered)
        except RolloutFailedError as exc:
            self._note(rendered, decision, ok=False, diagnosis=exc.diagnosis)
            raise
        self._note(rendered, decision, ok=True, ready_after_s=outcome.ready_after_s)
        return outcome

    def _note(self, rendered: RenderedRollout, decision: RolloutDecision, *, ok: bool, **found: Any) -> None:
        diagnosis: Diagnosis | None = found.get("diagnosis")
        self.attempts.append(
            Attempt(
                name=rendered.name,
                revision=rendered.revision,
                strategy=decision.strategy,
                rollback=decision.rollback,
                ok=ok,
                ready_after_s=found.get("ready_after_s"),
                failure=diagnosis.describe()[:4000] if diagnosis else None,
                trouble=diagnosis.trouble.value if diagnosis else None,
            )
        )

    def steps(self, config: RolloutConfig, decision: RolloutDecision, rendered: RenderedRollout) -> Outcome:
        outcome = Outcome(rendered, None, "unknown", 0, 0, "unknown")
        for step in decision.steps:
            get_run_logger().info("rollout %s: %s", rendered.name, step.value)
            if step is Step.DELETE_OLD and decision.old_name:
                delete_workload(self.api, self.namespace, decision.old_name, self.inputs.kube,
                                timeout_s=self.inputs.wait.delete_timeout_s)
            elif step is Step.APPLY_NEW:
                apply_objects(self.api, [rendered.workload])
            elif step is Step.WAIT_READY:
                self.wait_ready(rendered, outcome)
                self.keep_start(config, rendered, outcome)
            elif step is Step.SAVE_CACHE and config.compile_cache and outcome.cache != "hit":
                self.save_cache(rendered, outcome)
            elif step is Step.EVALUATE:
                self.check(rendered)
            elif step is Step.SWITCH_SERVICE:
                apply_objects(self.api, list(rendered.services))
        return outcome

    def wait_ready(self, rendered: RenderedRollout, outcome: Outcome) -> None:
        expected = rendered.nodes
        ready = wait_rollout_ready(
            self.api,
            self.namespace,
            rendered.name,
            expected,
            budget_s=rendered.startup_budget_s,
            wait=self.inputs.wait,
            kube=self.inputs.kube,
            expected_s=rendered.expected_start_s,
            across_nodes=bool(rendered.worker_args),
        )
        outcome.ready_after_s, outcome.api_calls = round(ready.ready_after_s, 3), ready.api_calls
        outcome.ready_at = clock().now()
        outcome.pods = ready.pods
        outcome.image_pull = image_pull_of(self.api, self.namespace, ready.pods, rendered.image, self.inputs.kube)
        leader = f"{rendered.name}-0"
        outcome.cache = pod_cache_outcome(self.api, self.namespace, leader) or "unknown"
        log = "\n".join(log_tail(self.api, self.namespace, leader, "vllm", 500))
        outcome.server = server_from_log(log)
        outcome.startup = StartupComparison(
            predicted_s=rendered.expected_start_s, warm=rendered.start_warm, basis=rendered.expected_basis,
            measured=engine_startup_from_log(log),
        )
        if rendered.worker_args:  # one copy spans several nodes: its NCCL traffic between them must be on EFA
            found = transport_diagnosis(pod_log(self.api, self.namespace, leader, "vllm"), pod=leader)
            if found is not None:
                raise RolloutFailedError(found)

    def save_cache(self, rendered: RenderedRollout, outcome: Outcome) -> None:
        """Save the compile cache once the Services point at the new server; never raises.

        The server already serves (this is the last step): an S3 hiccup, a missing permission or no egress
        must not fail the stage, whose failure would tear down a warm server after a cold start of hours.
        The save runs as its own task run, awaited up to ``cache_save_timeout_s``; a failure or a timeout
        is a warning in the log and in ``report.json`` (``rollout.compile_cache.save``), and the next
        campaign finds no complete cache (no marker) and starts cold.
        """
        inputs = self.inputs
        deadline = inputs.wait.cache_save_timeout_s
        future = save_caches.submit(
            self.api, rendered, inputs.spec.campaign_id, outcome.pods, inputs.weights_settings, inputs.kube, deadline
        )
        try:
            # The task's own wait ends at the deadline; the margin covers its API calls around that wait.
            outcome.saved = future.result(timeout=deadline + 4 * inputs.kube.request_timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the serving server stays up
            outcome.cache_save = "failed"
            outcome.cache_save_detail = f"{type(exc).__name__}: {exc}"[:1000]
            get_run_logger().warning(
                "rollout %s serves; its compile cache was not saved (%s): the next campaign starts cold",
                rendered.name,
                outcome.cache_save_detail,
            )
            return
        outcome.cache_save = "saved"

    def check(self, rendered: RenderedRollout) -> None:
        key = ensure_api_key(self.api, self.namespace, self.inputs.spec.campaign_id)
        leader = f"{rendered.name}-0"
        with port_forward(self.api, self.namespace, leader, self.inputs.rollout.port, self.inputs.kube) as url:
            problem = check_endpoint(url, key, self.inputs.spec.served_model_name, self.inputs.wait)
        if problem:
            raise RolloutFailedError(
                Diagnosis(trouble=Trouble.CHECK, pod=leader, container="vllm", message=problem, fatal=True)
            )

    def decide(self, config: RolloutConfig) -> tuple[RolloutDecision, Serving | None]:
        """The strategy, from what the record says serves and what the cluster really runs."""
        on_cluster = serving_workloads(self.api, self.namespace, self.inputs.spec.campaign_id)
        last = self.inputs.last_good
        current = last if last is not None and last.name in on_cluster else None
        for name in sorted(set(on_cluster) - ({current.name} if current else set())):
            # Left over from a run that failed or was interrupted before it was recorded good.
            delete_workload(self.api, self.namespace, name, self.inputs.kube,
                            timeout_s=self.inputs.wait.delete_timeout_s)
        return choose_strategy(current, config, nodes_available=self.inputs.cluster.nodes_ready), current

    def result(self, outcome: Outcome, decision: RolloutDecision, *, rolled_back: bool) -> RolloutResult:
        rendered, config = outcome.rendered, self.inputs.spec.serving
        return RolloutResult(
            kind=rendered.kind,
            name=rendered.name,
            namespace=rendered.namespace,
            revision=rendered.revision,
            strategy=decision.strategy,
            nodes=rendered.nodes,
            image=rendered.image,
            args=rendered.leader_args,
            ready_after_s=outcome.ready_after_s,
            ready_at=outcome.ready_at,
            startup_budget_s=rendered.startup_budget_s,
            endpoint_access=rendered.endpoint_access,
            endpoint_note=PORT_FORWARD_NOTE,
            server=outcome.server,
            compile_cache={
                "result": outcome.cache if config.compile_cache else "off",
                "key": rendered.cache_key,
                "uri": rendered.cache_uri,
                "saved_jobs": outcome.saved,
                "save": outcome.cache_save,
                "save_detail": outcome.cache_save_detail,
            },
            rolled_back=rolled_back,
            attempts=tuple(self.attempts),
            api_calls_while_waiting=outcome.api_calls,
            image_pull=outcome.image_pull,
            startup=outcome.startup,
        )
