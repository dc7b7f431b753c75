"""Shared inputs of the rollout tests: K3 plans, specs, configs, and strict schema checks."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
from capserve_sandbox.kube.pods import node_selector_matches, untolerated_taint

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.cluster.addons import lws_crd
from capserve.core.planner.plan import ParallelLayout, ServingPlan, plan_serving
from capserve.core.planner.shapes import Shape
from capserve.core.rollout.config import RolloutConfig, rollout_config
from capserve.core.rollout.workload import RolloutTarget
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.weights.placement import Layout

SHA = "0123456789abcdef0123456789abcdef01234567"
K3_RECIPE_ARGS = ["--trust-remote-code", "--load-format", "fastsafetensors", "--enable-prefix-caching",
                  "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]
VERSIONS = ("1.33", "1.34")


def spec(**serving: Any) -> CampaignSpec:
    return parse_spec({
        "name": "k3-demo",
        "model": {"catalog": "kimi-k3"},
        "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge",
                     "regions": ["us-east-2"], "reservation_id": "cr-0123456789abcdef0"},
        "weights": {"s3_bucket": "capserve-weights"},
        "serving": {"image": "vllm/vllm-openai:kimi-k3", "max_model_len": 262144, "max_num_seqs": 8,
                    "served_model_name": "kimi-k3", "extra_args": K3_RECIPE_ARGS, **serving},
    })


def parallel_layout(*, tp: int, pp: int = 1, dp: int = 1, nodes: int = 1, ep: bool = False, gpus_per_node: int = 8,
                    sequences: int = 8, name: str | None = None) -> ParallelLayout:
    """One engine per copy on ``nodes`` nodes, as the planner lays it out (and validates it)."""
    shape = Shape(tp=tp, pp=pp, dp=dp, expert_parallel=ep, gpus_per_node=gpus_per_node)
    return ParallelLayout(
        layout=name or shape.name, nodes=nodes, gpus_per_node=gpus_per_node, gpus_per_node_used=shape.gpus // nodes,
        tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, data_parallel_local=dp // nodes if dp > 1 else 1,
        expert_parallel=shape.ep_size, enable_expert_parallel=ep, serving_replicas=1, gpus_per_replica=shape.gpus,
        nodes_per_replica=nodes, sequences_per_dp_rank=-(-sequences // dp),
    )


def k3_plan(instance_type: str = "p6-b300.48xlarge", **update: Any) -> ServingPlan:
    """K3's plan on ``instance_type``; ``update`` forces another layout (its ``parallel`` kept consistent)."""
    plan = plan_serving(get_model("kimi-k3"), get_instance_type(instance_type), context_length=262144, concurrency=8)
    if not update:
        return plan
    fields = {k: update.get(k, getattr(plan, k)) for k in ("layout", "nodes", "tensor_parallel", "pipeline_parallel",
                                                            "data_parallel", "expert_parallel")}
    parallel = parallel_layout(
        tp=fields["tensor_parallel"], pp=fields["pipeline_parallel"], dp=fields["data_parallel"], nodes=fields["nodes"],
        ep=fields["expert_parallel"] > 1, gpus_per_node=plan.gpus_per_node, sequences=plan.concurrency,
        name=fields["layout"],
    )
    return plan.model_copy(update={**update, "parallel": parallel})


def k3_ep16_on_two_b200() -> ServingPlan:
    """K3 on two p6-b200 as DP16 + EP16 (the planner's other two-node candidate)."""
    return k3_plan("p6-b200.48xlarge", layout="DP16+EP16", nodes=2, tensor_parallel=1, pipeline_parallel=1,
                   data_parallel=16, expert_parallel=16)


def config_for(plan: ServingPlan, the_spec: CampaignSpec | None = None, **extra: Any) -> RolloutConfig:
    weights_layout = Layout(nodes=plan.nodes, expert_parallel=plan.expert_parallel)
    return rollout_config(
        plan, the_spec or spec(), model_repo="moonshotai/Kimi-K3", revision_sha=SHA,
        node_bytes=plan.weight_bytes // plan.nodes if weights_layout.splits_experts else plan.weight_bytes,
        splits_experts=weights_layout.splits_experts, **extra,
    )


def target_for(config: RolloutConfig, color: str = "blue", *, warm: bool = False, spare: int = 0) -> RolloutTarget:
    """Staged nodes as weights_to_nodes names them: replica r, node n on the (r × nodes + n)-th node."""
    nodes = config.layout.nodes_per_replica
    names = [f"ip-10-64-0-{10 + i}.ec2.internal" for i in range(nodes * config.replicas + spare)]
    placement = {n: tuple(names[r * nodes + n] for r in range(config.replicas)) for n in range(nodes)}
    return RolloutTarget(campaign_id="k3-demo", color=color, placement=placement, node_target="nvme",  # type: ignore[arg-type]
                         bucket="capserve-weights", prefix="capserve/weights", cache_warm=warm)


@cache
def _lws_schema() -> dict[str, Any]:
    crd = lws_crd()  # the vendored LWS v0.10.0 release's CRD
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server enforces it with strict field validation: unknown fields are errors.

    A structural schema prunes unknown fields silently; `kubectl apply --validate=strict` (and server-side
    apply's field validation) refuse them instead. Objects marked x-kubernetes-preserve-unknown-fields stay open.
    """
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def validate_lws(obj: dict[str, Any]) -> None:
    """The LeaderWorkerSet against the LWS CRD's schema (strict), and each pod template against Kubernetes'."""
    body = {k: v for k, v in obj.items() if k != "metadata"}  # metadata is validated by the API server itself
    jsonschema.validate(body, _lws_schema())
    templates = obj["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in templates:
            for version in VERSIONS:
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t", "namespace": "n"},
                     "template": templates[key]},
                    version, strict=True,
                )


def validate_k8s(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


# EKS spells taint effects NO_SCHEDULE; Kubernetes NoSchedule (EKS API reference, Taint).
_EKS_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def node_taints(eks_taints: list[dict[str, str]]) -> list[dict[str, str]]:
    """Taints as an EKS node group request spells them, the way they appear on the Node object."""
    return [{"key": t["key"], "value": t.get("value", ""), "effect": _EKS_EFFECTS[t["effect"]]} for t in eks_taints]


def refusal(pod_spec: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]) -> str | None:
    """Why the scheduler keeps ``pod_spec`` off a node with these labels and taints (None: it may go there), by the
    sandbox scheduler's label and taint rules (the one copy of them)."""
    taint = untolerated_taint(taints, pod_spec.get("tolerations") or [], ("NoSchedule", "NoExecute"))
    if taint is not None:
        return f"untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    if not node_selector_matches(pod_spec, {"metadata": {"labels": labels}}):
        return "node affinity/selector"
    return None
