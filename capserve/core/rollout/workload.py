"""The serving workload: one LeaderWorkerSet per colour, rendered from a ``RolloutConfig`` (pure).

**Why a LeaderWorkerSet even on one node** (size 1), not a Deployment: one shape for every layout
means one set of labels, one Service selector, one wait/diagnose path and one blue/green naming
scheme, whatever the node count; a size-1 group creates no worker StatefulSet, so it costs nothing
extra (docs/serving.md §2). A Deployment would also need its rolling update turned off: its
default surge starts a second full copy, which a reservation sized for one copy cannot schedule.

Several nodes: a group of size N, ``startupPolicy: LeaderCreated`` (with ``LeaderReady`` the workers
would wait for a leader that only becomes ready once they have joined: a deadlock, §2). The leader
serves the API; workers run ``--headless`` and join it at ``$(LWS_LEADER_ADDRESS)``.

Each pod gets a whole GPU node: every GPU of the instance type (from the catalog) and, when the layout
spans nodes, every EFA device and the hugepages EFA uses (``capserve.core.cluster.efa``); most of the
node's CPU and memory, ``/dev/shm`` as a memory emptyDir,
``IPC_LOCK``, the GPU pool's node selector and taint toleration, and a required anti-affinity so no
two vLLM pods of the campaign share a node. It runs only on nodes whose NVMe holds its weights: the
staging result says which; when nodes hold different experts, the leader is pinned to layout node
0's nodes and the worker to node 1's (and the prepare container checks the marker).

vLLM names the weights by a path that does not change with the revision (``served_model_path``): each
revision is staged into its own folder (``node_model_path``), and the vLLM container mounts its revision's
folder there (a ``subPath`` of the weights volume). vLLM hashes the model path into its compile cache, so
a new revision of the same architecture finds the graphs the last one compiled: a warm start (docs/serving.md
§4). The old revision's folder stays untouched while it serves, so the new one is staged beside it first.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.addons import GPU_TOLERATIONS
from capserve.core.cluster.efa import efa_needs
from capserve.core.cluster.eks import gpu_pool_selector
from capserve.core.errors import PermanentError
from capserve.core.rollout.args import API_KEY_ENV, WORKER_INDEX, vllm_args
from capserve.core.rollout.cache import cache_env, cache_uri, cache_volume, prepare_container
from capserve.core.rollout.config import RolloutConfig
from capserve.core.rollout.layout import launch_blockers, launch_mode
from capserve.core.rollout.names import (
    REVISION_LABEL,
    ROLE_LABEL,
    ROLLOUT_LABEL,
    Color,
    base_labels,
    serving_namespace,
    workload_name,
)
from capserve.core.rollout.probes import budget_for_s, expected_start_s, leader_probes, startup_budget_s
from capserve.core.rollout.secret import api_key_env
from capserve.core.rollout.service import endpoint_services
from capserve.core.rollout.settings import RolloutSettings
from capserve.core.rollout.start_history import MeasuredStart
from capserve.core.weights.node_staging import NodeStagingResult
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import CONTAINER_DIR, node_model_path, weights_volume

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
SERVED_DIR = "/model"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CACHE_KEY_ANNOTATION = "capserve.io/compile-cache-key"
GIB = 1024**3


class RolloutTarget(BaseModel):
    """Where a configuration is rendered: the campaign, the colour, the nodes holding each node's weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign (labels, namespace).")
    color: Color = Field(description="Which of the two workload names to render.")
    placement: dict[int, tuple[str, ...]] = Field(
        description="Layout node index → the Kubernetes nodes whose NVMe (or FSx mount) holds its weights."
    )
    node_target: Literal["fsx", "nvme"] = Field(description="Where the staged weights live.")
    bucket: str = Field(min_length=3, max_length=63, description="The weights bucket (compile caches live there too).")
    prefix: str = Field(max_length=512, description="The weights key prefix.")
    cache_warm: bool = Field(
        False, description="S3 holds a complete compile cache for this configuration's key (shorter startup budget)."
    )
    measured_start: MeasuredStart | None = Field(
        None, description="The latest measured start of this server shape, cold or warm as this one will be."
    )


def served_model_path(repo: str) -> str:
    """The weights as vLLM's ``--model`` names them: the same for every revision of ``repo`` (its compile cache
    hashes this string, docs/serving.md §4)."""
    return f"{SERVED_DIR}/{repo}"


def staged_subpath(repo: str, sha: str) -> str:
    """The revision's folder inside the weights volume (where ``node_model_path`` has the staging Job write it)."""
    return node_model_path(repo, sha).removeprefix(CONTAINER_DIR).strip("/")


def placement_from_staging(staged: NodeStagingResult) -> dict[int, tuple[str, ...]]:
    """Layout node index → Kubernetes nodes staged with its files (one per replica), from the staging result."""
    placement: dict[int, list[str]] = {}
    for job in staged.jobs:
        placement.setdefault(job.node, []).append(job.kube_node)
    return {node: tuple(sorted(kube_nodes)) for node, kube_nodes in sorted(placement.items())}


class RenderedRollout(BaseModel):
    """Everything one rollout applies, and what the report says about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["LeaderWorkerSet"] = Field("LeaderWorkerSet", description="Kind of the workload object.")
    name: str = Field(min_length=1, max_length=63, description="Workload name (one per colour).")
    namespace: str = Field(min_length=1, max_length=63, description="The campaign's namespace.")
    color: Color = Field(description="The colour rendered.")
    revision: str = Field(min_length=1, max_length=16, description="RolloutConfig.revision.")
    nodes: int = Field(ge=1, le=4096, description="GPU nodes the workload occupies (nodes × replicas).")
    image: str = Field(min_length=1, max_length=400, description="Image as pulled.")
    leader_args: tuple[str, ...] = Field(description="`vllm serve` arguments of the leader (no secret in them).")
    worker_args: tuple[str, ...] = Field(default=(), description="Arguments of the workers (empty on one node).")
    startup_budget_s: int = Field(ge=1, description="The startup probe's budget.")
    expected_start_s: float = Field(
        0.0, ge=0, description="Process start → listening expected for this start (warm or cold)."
    )
    expected_basis: str = Field(
        "time model", max_length=200, description="Where that comes from: the time model, or a measured start."
    )
    start_warm: bool = Field(False, description="This start is expected to find its compile cache.")
    cache_key: str = Field(min_length=1, max_length=64, description="Compile-cache key.")
    cache_uri: str = Field(min_length=1, max_length=1024, description="S3 folder of this key's caches.")
    endpoint_access: str = Field(min_length=1, max_length=32, description="How the endpoint is reached: port-forward.")
    workload: dict[str, Any] = Field(description="The LeaderWorkerSet object.")
    services: tuple[dict[str, Any], ...] = Field(description="Services pointing at this workload's leader.")


def render_rollout(
    config: RolloutConfig,
    target: RolloutTarget,
    *,
    settings: RolloutSettings | None = None,
    weights: WeightsSettings | None = None,
) -> RenderedRollout:
    """The LeaderWorkerSet and Services for ``config`` under ``target``'s colour.

    Raises PermanentError for a layout one LeaderWorkerSet cannot start (``launch_blockers``) or
    too few staged nodes, and SpecError for extra arguments that repeat or contradict the plan.
    """
    settings = settings or RolloutSettings()
    weights = weights or WeightsSettings()
    layout = config.layout
    blockers = launch_blockers(layout, splits_experts=config.splits_experts)
    if blockers:
        raise PermanentError("cannot roll out this layout: " + "; ".join(blockers))
    _check_placement(config, target)
    name = workload_name(target.color)
    namespace = serving_namespace(target.campaign_id)
    model_path = node_model_path(config.model_repo, config.revision_sha)
    warm = target.cache_warm and config.compile_cache
    override = config.startup_budget_minutes
    # The time model reads the weights at the rate of where they live on this instance type (docs/timeline.md).
    on_nodes = layout.nodes_per_replica * config.replicas
    expected = expected_start_s(
        config.compile_shape, config.node_bytes, warm=warm, instance_type=config.instance_type,
        storage=target.node_target, nodes=on_nodes,
    )
    basis = "time model"
    measured = target.measured_start
    if measured is not None:  # this shape started before: that is the better prediction
        expected, basis = measured.to_listening_s, measured.basis(warm=warm)
    budget = override * 60 if override is not None else budget_for_s(expected)
    # vLLM hashes VLLM_ENGINE_READY_TIMEOUT_S into its compile-cache key: the model's cold budget, never a
    # measurement, so that it stays the same from one start of the shape to the next (docs/serving.md §4).
    ready_timeout = startup_budget_s(
        config.compile_shape, config.node_bytes, warm=False, override_minutes=override,
        instance_type=config.instance_type, storage=target.node_target, nodes=on_nodes,
    )
    uri = cache_uri(target.bucket, target.prefix, config.cache_key)

    leader_args, worker_args = pod_arguments(config, settings)
    common = _PodParts(config, target, name, model_path, uri, budget, ready_timeout, settings, weights)
    leader = common.template("leader", leader_args, _hosts(config, target, 0))
    nodes = layout.nodes_per_replica
    templates: dict[str, Any] = {"size": nodes, "restartPolicy": "RecreateGroupOnPodRestart"}
    if nodes == 1:
        templates["workerTemplate"] = leader  # a group of one: its leader uses the worker template
    else:
        templates["leaderTemplate"] = leader
        templates["workerTemplate"] = common.template("worker", worker_args, _hosts(config, target, 1))
    workload = {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**base_labels(target.campaign_id), ROLLOUT_LABEL: name, REVISION_LABEL: config.revision},
            "annotations": {CACHE_KEY_ANNOTATION: config.cache_key},
        },
        "spec": {
            "replicas": config.replicas,
            "startupPolicy": "LeaderCreated",
            # Never surge: the reservation holds exactly the GPUs of the groups it serves.
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": templates,
        },
    }
    return RenderedRollout(
        name=name,
        namespace=namespace,
        color=target.color,
        revision=config.revision,
        nodes=nodes * config.replicas,
        image=config.image_ref,
        leader_args=tuple(leader_args),
        worker_args=tuple(worker_args),
        startup_budget_s=budget,
        expected_start_s=round(expected, 1),
        expected_basis=basis,
        start_warm=warm,
        cache_key=config.cache_key,
        cache_uri=uri,
        endpoint_access=config.endpoint_access,
        workload=workload,
        services=tuple(
            endpoint_services(namespace, target.campaign_id, name, access=config.endpoint_access, settings=settings)
        ),
    )


def pod_arguments(config: RolloutConfig, settings: RolloutSettings) -> tuple[list[str], list[str]]:
    """The ``vllm serve`` arguments of the leader and of the workers (none for a one-node group), as rendered.

    Preflight parses these same lists with vLLM's parser before anything is bought (``command.py``).
    Raises SpecError for extra arguments that repeat or contradict the plan.
    """
    layout = config.layout
    model_path = served_model_path(config.model_repo)
    leader = vllm_args(layout, config.engine, role="leader", model_path=model_path, settings=settings)
    if layout.nodes_per_replica == 1:
        return leader, []
    # Data-parallel workers need their start rank as a number; only 2-node groups get here (blockers).
    rank: int | str = 1 if launch_mode(layout) == "multi-node-dp" else WORKER_INDEX
    worker = vllm_args(layout, config.engine, role="worker", model_path=model_path, settings=settings, worker_rank=rank)
    return leader, worker


def _check_placement(config: RolloutConfig, target: RolloutTarget) -> None:
    nodes, replicas = config.layout.nodes_per_replica, config.replicas
    missing = [node for node in range(nodes) if len(target.placement.get(node, ())) < replicas]
    if missing:
        raise PermanentError(
            f"{nodes} node(s) × {replicas} replica(s) need staged weights on enough Kubernetes "
            f"nodes, but layout node(s) {missing} have fewer than {replicas} (staged: {target.placement}); "
            "run the weights_to_nodes stage for this layout first"
        )


def _hosts(config: RolloutConfig, target: RolloutTarget, node: int) -> list[str]:
    """The Kubernetes nodes a pod of layout node ``node`` may run on."""
    if config.splits_experts:
        return sorted(target.placement[node])
    return sorted({host for hosts in target.placement.values() for host in hosts})


class _PodParts:
    """What the leader and worker pod templates share; ``template`` renders one of them."""

    def __init__(
        self,
        config: RolloutConfig,
        target: RolloutTarget,
        name: str,
        model_path: str,
        uri: str,
        budget: int,
        ready_timeout: int,
        settings: RolloutSettings,
        weights: WeightsSettings,
    ) -> None:
        self.config, self.target, self.name = config, target, name
        self.model_path, self.uri, self.budget, self.ready_timeout = model_path, uri, budget, ready_timeout
        self.settings, self.weights = settings, weights
        self.instance = get_instance_type(config.instance_type)
        self.efa = efa_needs(self.instance, config.layout.nodes_per_replica, hugepages_mib=settings.efa_hugepages_mib)

    def resources(self) -> dict[str, str]:
        instance, settings = self.instance, self.settings
        cpu = max(1, math.floor(instance.vcpus * settings.cpu_fraction))
        memory_gib = math.floor(instance.memory_bytes / GIB * settings.memory_fraction)
        if memory_gib <= settings.shm_gib:
            raise PermanentError(
                f"{instance.name}: a {memory_gib} GiB memory request cannot hold the {settings.shm_gib} GiB /dev/shm"
            )
        amounts = {"cpu": str(cpu), "memory": f"{memory_gib}Gi", "nvidia.com/gpu": str(instance.gpus_per_node)}
        if self.efa.used:
            # A layout across nodes: every EFA device of the node (EKS EFA guide: request all of them), and
            # the huge pages libfabric uses for EFA buffers, which the nodes allocate at boot (docs/serving.md
            # §5.2). A one-node layout talks over NVLink only and asks for neither.
            amounts["vpc.amazonaws.com/efa"] = str(self.efa.devices)
            if self.efa.hugepages_mib:
                amounts["hugepages-2Mi"] = f"{self.efa.hugepages_mib}Mi"
        return amounts

    @property
    def nccl_debug(self) -> str:
        return "INFO" if self.config.layout.nodes_per_replica > 1 else self.settings.nccl_debug

    def env(self, role: str, node: str) -> list[dict[str, Any]]:
        env: list[dict[str, Any]] = [
            # The address vLLM advertises to the other nodes: the pod's own IP (docs/serving.md §1.3).
            {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            # Weights are on the node; vLLM must never reach for the Hub.
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            # The same value cold or warm: vLLM hashes it into the compile-cache key (docs/serving.md §4).
            {"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": str(self.ready_timeout)},
            # INFO on several nodes: the rollout reads NCCL's transport from the leader's log (diagnosis.py,
            # transport_diagnosis) and refuses a server whose traffic between nodes is not on EFA.
            {"name": "NCCL_DEBUG", "value": self.nccl_debug},
        ]
        if self.efa.used:
            # libfabric's EFA provider with GPUDirect RDMA (AWS EFA cheatsheet; docs/serving.md §5.2).
            env += [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"}]
        env += cache_env(node)
        # The recipe's and serving.extra_env's (plain values; names the rollout sets are refused: args.py).
        env += [{"name": name, "value": value} for name, value in self.config.engine.extra_env]
        if role == "leader":
            env.append(api_key_env(API_KEY_ENV))
        return env

    def template(self, role: Literal["leader", "worker"], args: list[str], hosts: list[str]) -> dict[str, Any]:
        config, target, settings = self.config, self.target, self.settings
        node = "0" if role == "leader" else WORKER_INDEX
        amounts = self.resources()
        container: dict[str, Any] = {
            "name": "vllm",
            "image": config.image_ref,
            "imagePullPolicy": "IfNotPresent",
            "command": ["vllm", "serve"],
            "args": list(args),
            "env": self.env(role, node),
            "resources": {"requests": dict(amounts), "limits": dict(amounts)},
            # Pinned memory for RDMA (vLLM parallelism docs; EKS EFA guide).
            "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            "volumeMounts": [
                # This revision's folder at the path every revision is served from (served_model_path).
                {
                    "name": "weights",
                    "mountPath": served_model_path(config.model_repo),
                    "subPath": staged_subpath(config.model_repo, config.revision_sha),
                    "readOnly": True,
                },
                {"name": "compile-cache", "mountPath": "/cache"},
                {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's shared-memory mount point, not a temporary file
            ],
        }
        if role == "leader":
            container["ports"] = [{"name": "http", "containerPort": settings.port, "protocol": "TCP"}]
            container.update(leader_probes(self.budget, settings))
        # Headless workers serve no HTTP: nothing to probe. A dead worker takes its group down
        # (RecreateGroupOnPodRestart) and the leader's /health turns 503.
        labels = {
            **base_labels(target.campaign_id),
            ROLLOUT_LABEL: self.name,
            ROLE_LABEL: role,
            REVISION_LABEL: config.revision,
        }
        spec: dict[str, Any] = {
            # A Service called "vllm" would inject VLLM_PORT=tcp://… (docs/serving.md §3.1): no service links.
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": settings.termination_grace_s,
            "nodeSelector": gpu_pool_selector(target.campaign_id),
            "tolerations": [dict(t) for t in GPU_TOLERATIONS],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": hosts}]}
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": base_labels(target.campaign_id)},
                            "topologyKey": HOSTNAME_LABEL,
                        }
                    ]
                },
            },
            "initContainers": [
                prepare_container(
                    image=self.weights.staging_image,
                    model_path=self.model_path,
                    uri=self.uri,
                    enabled=config.compile_cache,
                    node=node,
                    check_weights=config.splits_experts,
                )
            ],
            "containers": [container],
            "volumes": [
                weights_volume(target.node_target, self.weights),
                cache_volume(config.cache_key, self.weights),
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{settings.shm_gib}Gi"}},
            ],
        }
        return {"metadata": {"labels": labels}, "spec": spec}
