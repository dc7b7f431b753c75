"""The serving workload as rendered: schemas (strict), GPUs/EFA, placement, probes, secrets, multi-node shape."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from pydantic import SecretStr
from rollout_fixtures import (
    K3_RECIPE_ARGS,
    SHA,
    config_for,
    k3_ep16_on_two_b200,
    k3_plan,
    node_taints,
    refusal,
    spec,
    target_for,
    validate_k8s,
    validate_lws,
)

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.eks import GPU_TAINT, gpu_pool_selector
from capserve.core.drain import (
    DRAIN_BEFORE_END_MINUTES,
    ENGINE_EXIT_S,
    HARD_TEARDOWN_BEFORE_END_MINUTES,
    POD_TERMINATION_GRACE_S,
    RUN_START_S,
)
from capserve.core.errors import PermanentError
from capserve.core.rollout.cache import cache_outcome, compile_config_digest, render_cache_save_job
from capserve.core.rollout.image import ImageMirrorResult
from capserve.core.rollout.layout import launch_mode
from capserve.core.rollout.probes import probe_budget_s
from capserve.core.rollout.secret import api_key_secret, redact_for_disk
from capserve.core.rollout.settings import RolloutSettings
from capserve.core.rollout.start_history import MeasuredStart, shape_key
from capserve.core.rollout.workload import placement_from_staging, render_rollout
from capserve.core.weights.node_staging import NodeStagingResult, StagingJob
from capserve.core.weights.placement import Layout, rank_experts

KEY = SecretStr("sk-capserve-test-0123456789-distinctive")
GPU_NODE_TAINTS = node_taints([GPU_TAINT])


def leader(rendered: Any) -> dict[str, Any]:
    templates = rendered.workload["spec"]["leaderWorkerTemplate"]
    return templates.get("leaderTemplate") or templates["workerTemplate"]


def worker(rendered: Any) -> dict[str, Any]:
    return rendered.workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]


def vllm_container(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
    return container


def all_objects(rendered: Any) -> list[dict[str, Any]]:
    save = render_cache_save_job(campaign_id="k3-demo", namespace=rendered.namespace, color=rendered.color,
                                 key=rendered.cache_key, uri=rendered.cache_uri, node_index=0, kube_node="ip-a")
    return [rendered.workload, *rendered.services, save, api_key_secret(rendered.namespace, "k3-demo", KEY)]


# ------------------------------------------------------------------ schemas


@pytest.mark.parametrize("case", ["k3-one-b300", "k3-tp8pp2-two-b200", "k3-ep16-two-b200"])
def test_every_rendered_object_validates_strictly(case: str) -> None:
    plan = {"k3-one-b300": k3_plan(), "k3-tp8pp2-two-b200": k3_plan("p6-b200.48xlarge"),
            "k3-ep16-two-b200": k3_ep16_on_two_b200()}[case]
    config = config_for(plan, spec())
    rendered = render_rollout(config, target_for(config))
    validate_lws(rendered.workload)
    for obj in all_objects(rendered)[1:]:
        validate_k8s(obj)
    assert [s["spec"]["type"] for s in rendered.services] == ["ClusterIP"]  # never a LoadBalancer


def test_the_strict_lws_check_catches_a_misspelt_field() -> None:
    config = config_for(k3_plan())
    workload = render_rollout(config, target_for(config)).workload
    workload["spec"]["startupPolicyy"] = "LeaderCreated"
    with pytest.raises(jsonschema.ValidationError, match="startupPolicyy"):
        validate_lws(workload)


# ------------------------------------------------------------------ one node


def test_k3_on_one_b300_is_a_leaderworkerset_of_one_with_all_gpus_and_no_efa() -> None:
    config = config_for(k3_plan())
    rendered = render_rollout(config, target_for(config))
    spec_ = rendered.workload["spec"]
    assert (rendered.kind, rendered.name, rendered.namespace) == ("LeaderWorkerSet", "vllm-blue", "capserve-k3-demo")
    assert spec_["leaderWorkerTemplate"]["size"] == 1 and "leaderTemplate" not in spec_["leaderWorkerTemplate"]
    assert spec_["startupPolicy"] == "LeaderCreated" and spec_["replicas"] == 1
    assert spec_["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] == 0
    container = vllm_container(leader(rendered))
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"
    # TP8 on one node talks over NVLink only: no EFA device, no huge pages, no libfabric EFA provider.
    assert "vpc.amazonaws.com/efa" not in limits and "hugepages-2Mi" not in limits
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"} & {e["name"] for e in container["env"]}
    assert container["resources"]["requests"] == limits  # Guaranteed QoS
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert container["command"] == ["vllm", "serve"]
    args = container["args"]
    assert args[:8] == ["--model", "/model/moonshotai/Kimi-K3", "--served-model-name", "kimi-k3",
                        "--port", "8000", "--tensor-parallel-size", "8"]
    for absent in ("--headless", "--nnodes", "--data-parallel-size", "--enable-expert-parallel"):
        assert absent not in args
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8" and args[args.index("--max-model-len") + 1] == "262144"
    assert args[-8:] == ["--trust-remote-code", "--load-format", "fastsafetensors", "--enable-prefix-caching",
                         "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]
    assert list(rendered.leader_args) == args


def test_shm_is_a_memory_emptydir_inside_the_memory_limit() -> None:
    config = config_for(k3_plan())
    template = leader(render_rollout(config, target_for(config)))
    (shm,) = [v for v in template["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    memory = vllm_container(template)["resources"]["limits"]["memory"]
    assert int(memory.removesuffix("Gi")) > 64  # memory-backed emptyDir counts against the limit
    mounts = {m["name"]: m for m in vllm_container(template)["volumeMounts"]}
    assert mounts["dshm"]["mountPath"] == "/dev/shm" and mounts["weights"]["readOnly"] is True


def test_vllm_reads_the_revisions_folder_at_a_path_no_revision_changes() -> None:
    """vLLM hashes the model path into its compile cache (docs/serving.md §4): a path holding the sha made every
    new revision a cold start. Each revision keeps its own staged folder; the pod mounts it at one path."""
    one, other = config_for(k3_plan()), config_for(k3_plan()).model_copy(update={"revision_sha": "b" * 40})
    mounts = [
        {m["name"]: m for m in vllm_container(leader(render_rollout(c, target_for(c))))["volumeMounts"]}["weights"]
        for c in (one, other)
    ]
    assert [m["mountPath"] for m in mounts] == ["/model/moonshotai/Kimi-K3"] * 2
    assert [m["subPath"] for m in mounts] == [f"moonshotai/Kimi-K3/{SHA}", f"moonshotai/Kimi-K3/{'b' * 40}"]
    args = [render_rollout(c, target_for(c)).leader_args for c in (one, other)]
    assert args[0][:2] == args[1][:2] == ("--model", "/model/moonshotai/Kimi-K3")


def test_weights_and_caches_are_the_staging_jobs_host_paths_on_the_raid0_array() -> None:
    config = config_for(k3_plan())
    volumes = {v["name"]: v for v in leader(render_rollout(config, target_for(config)))["spec"]["volumes"]}
    # The staging Job mounts /mnt/k8s-disks/0/capserve/weights at /weights and fills /weights/<repo>/<sha>.
    assert volumes["weights"]["hostPath"] == {"path": "/mnt/k8s-disks/0/capserve/weights", "type": "Directory"}
    assert volumes["compile-cache"]["hostPath"]["path"] == f"/mnt/k8s-disks/0/capserve/cache/{config.cache_key}"


# ------------------------------------------------------------------ placement


def test_pods_go_only_to_staged_gpu_nodes_one_per_node() -> None:
    config = config_for(k3_plan())
    target = target_for(config, spare=1)
    template = leader(render_rollout(config, target))["spec"]
    staged, spare = "ip-10-64-0-10.ec2.internal", "ip-10-64-0-11.ec2.internal"
    gpu_labels = {**gpu_pool_selector("k3-demo"), "nvidia.com/gpu.present": "true"}
    assert refusal(template, {**gpu_labels, "kubernetes.io/hostname": staged}, GPU_NODE_TAINTS) is None
    # A GPU node whose NVMe was never staged, and a system node, are refused.
    unstaged = {**gpu_labels, "kubernetes.io/hostname": spare}
    assert refusal(template, unstaged, GPU_NODE_TAINTS) == "node affinity/selector"
    system = {"capserve.io/campaign": "k3-demo", "capserve.io/pool": "system", "kubernetes.io/hostname": staged}
    assert refusal(template, system, []) == "node affinity/selector"
    anti = template["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": {"matchLabels": {"capserve.io/campaign": "k3-demo",
                                                       "capserve.io/component": "vllm"}},
                     "topologyKey": "kubernetes.io/hostname"}]
    assert template["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_too_few_staged_nodes_is_refused() -> None:
    config = config_for(k3_plan("p6-b200.48xlarge"))
    target = target_for(config).model_copy(update={"placement": {0: ("ip-a",)}})
    with pytest.raises(PermanentError, match=r"layout node\(s\) \[1\]"):
        render_rollout(config, target)


def test_placement_comes_from_the_staging_result() -> None:
    jobs = tuple(StagingJob(job=f"j{r}{n}", replica=r, node=n, kube_node=f"ip-{r}{n}", files=1, bytes=1)
                 for r in range(2) for n in range(2))
    staged = NodeStagingResult(namespace="capserve-k3-demo", target="nvme", jobs=jobs)
    assert placement_from_staging(staged) == {0: ("ip-00", "ip-10"), 1: ("ip-01", "ip-11")}


# ------------------------------------------------------------------ two nodes


def test_k3_tp8_pp2_on_two_b200_leader_serves_workers_join_headless() -> None:
    config = config_for(k3_plan("p6-b200.48xlarge"))
    rendered = render_rollout(config, target_for(config))
    assert rendered.workload["spec"]["leaderWorkerTemplate"]["size"] == 2
    lead, work = rendered.leader_args, rendered.worker_args
    assert lead[lead.index("--pipeline-parallel-size") + 1] == "2"
    assert lead[lead.index("--nnodes") + 1] == "2" and lead[lead.index("--node-rank") + 1] == "0"
    assert lead[lead.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)" and "--headless" not in lead
    assert work[work.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)" and "--headless" in work
    assert "--api-key" not in work  # headless workers serve no HTTP
    # Across nodes, both pods take every EFA device (b200: 8 cards) and the huge pages EFA uses.
    instance = get_instance_type("p6-b200.48xlarge")
    for template in (leader(rendered), worker(rendered)):
        container = vllm_container(template)
        limits = container["resources"]["limits"]
        assert limits["vpc.amazonaws.com/efa"] == str(len(instance.efa_card_indices)) == "8"
        assert limits["hugepages-2Mi"] == "5120Mi" and container["resources"]["requests"] == limits
        assert {"name": "FI_PROVIDER", "value": "efa"} in container["env"]
    # Every node holds every expert (no expert parallelism): any staged node will do for any pod.
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    hosts = leader(rendered)["spec"]["affinity"]["nodeAffinity"][required]
    worker_hosts = worker(rendered)["spec"]["affinity"]["nodeAffinity"][required]
    assert hosts == worker_hosts
    assert hosts["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "ip-10-64-0-10.ec2.internal", "ip-10-64-0-11.ec2.internal"
    ]


def test_every_serving_pod_finishes_its_requests_and_exits_within_the_drains_stop() -> None:
    """vLLM aborts in-flight requests on SIGTERM unless --shutdown-timeout > 0; the kubelet SIGKILLs the pod after
    terminationGracePeriodSeconds; the drain (and the hard teardown) books that grace plus a run's start."""
    for plan in (k3_plan(), k3_plan("p6-b200.48xlarge")):
        config = config_for(plan)
        rendered = render_rollout(config, target_for(config))
        for template, args in ((leader(rendered), rendered.leader_args), (worker(rendered), rendered.worker_args)):
            if not args:
                continue
            grace = template["spec"]["terminationGracePeriodSeconds"]
            assert grace == POD_TERMINATION_GRACE_S == 60
            assert vllm_container(template)["args"] == list(args)
            timeout = int(args[args.index("--shutdown-timeout") + 1])
            assert timeout == 45 and timeout + ENGINE_EXIT_S <= grace
    # The drain's step before the hard teardown holds the grace and a scheduled run's start.
    assert (DRAIN_BEFORE_END_MINUTES - HARD_TEARDOWN_BEFORE_END_MINUTES) * 60 >= POD_TERMINATION_GRACE_S + RUN_START_S


def test_a_shorter_grace_shortens_vllms_drain_with_it() -> None:
    config = config_for(k3_plan())
    settings = RolloutSettings(termination_grace_s=30)
    rendered = render_rollout(config, target_for(config), settings=settings)
    assert leader(rendered)["spec"]["terminationGracePeriodSeconds"] == 30
    assert rendered.leader_args[rendered.leader_args.index("--shutdown-timeout") + 1] == "15"


def test_k3_ep16_on_two_b200_gives_node_i_the_experts_of_its_weight_index() -> None:
    plan = k3_ep16_on_two_b200()
    config = config_for(plan)
    assert config.splits_experts and launch_mode(config.layout) == "multi-node-dp"
    rendered = render_rollout(config, target_for(config))
    lead, work = rendered.leader_args, rendered.worker_args
    assert lead[lead.index("--data-parallel-size") + 1] == "16"
    assert lead[lead.index("--data-parallel-size-local") + 1] == "8"
    assert lead[lead.index("--data-parallel-address") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert "--enable-expert-parallel" in lead and "--enable-expert-parallel" in work
    assert "--data-parallel-start-rank" not in lead and "--headless" in work
    start = int(work[work.index("--data-parallel-start-rank") + 1])
    assert start == 8
    # vLLM: EP rank = DP rank × TP + TP rank (TP 1), experts in contiguous blocks per EP rank. The worker
    # owns EP ranks 8..15: exactly the experts the weight stage put on layout node 1, and the leader 0..7.
    weights = Layout(nodes=2, expert_parallel=16)
    worker_experts = range(rank_experts(start, num_experts=896, ep_size=16).start,
                           rank_experts(start + 7, num_experts=896, ep_size=16).stop)
    assert worker_experts == weights.node_experts(1, 896) == range(448, 896)
    assert weights.node_experts(0, 896) == range(0, 448)
    # ... and each pod can only run on the node staged with its index, which the prepare step checks.
    for template, node, host in ((leader(rendered), "0", "ip-10-64-0-10.ec2.internal"),
                                 (worker(rendered), "$(LWS_WORKER_INDEX)", "ip-10-64-0-11.ec2.internal")):
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [host]
        env = {e["name"]: e["value"] for e in template["spec"]["initContainers"][0]["env"]}
        assert env["EXPECTED_NODE"] == node and env["NODE_MARKER"] == ".capserve-node"


def test_max_num_seqs_is_per_data_parallel_rank() -> None:
    rendered = render_rollout(config_for(k3_ep16_on_two_b200()), target_for(config_for(k3_ep16_on_two_b200())))
    assert rendered.leader_args[rendered.leader_args.index("--max-num-seqs") + 1] == "1"  # 8 sequences over 16 ranks


def test_layouts_one_leaderworkerset_cannot_start_are_refused() -> None:
    plan = k3_plan("p6-b200.48xlarge", layout="DP32+EP32", nodes=4, tensor_parallel=1, pipeline_parallel=1,
                   data_parallel=32, expert_parallel=32)
    config = config_for(plan)
    with pytest.raises(PermanentError, match="only 2 nodes can carry distinct data-parallel start ranks"):
        render_rollout(config, target_for(config))


# ------------------------------------------------------------------ probes


def test_probes_leader_only_liveness_after_startup_and_a_k3_cold_budget_of_at_least_ten_minutes() -> None:
    for plan in (k3_plan(), k3_ep16_on_two_b200(), k3_plan("p6-b200.48xlarge")):
        config = config_for(plan)
        rendered = render_rollout(config, target_for(config))
        container = vllm_container(leader(rendered))
        startup = container["startupProbe"]
        # 1.5 × the time model's cold start, at least the 10-minute floor (docs/timeline.md §4).
        assert probe_budget_s(startup) >= rendered.startup_budget_s >= 10 * 60
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}  # needs no API key
        # Kubernetes starts liveness only after the startup probe succeeded: it cannot kill a loading pod.
        assert "initialDelaySeconds" not in container["livenessProbe"]
        if config.layout.nodes_per_replica > 1:
            assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(vllm_container(worker(rendered)))


def test_a_warm_cache_shrinks_the_budget_but_not_vllms_own_timeout() -> None:
    config = config_for(k3_plan())
    cold = render_rollout(config, target_for(config, warm=False))
    warm = render_rollout(config, target_for(config, warm=True))
    assert warm.startup_budget_s < cold.startup_budget_s
    env = {e["name"]: e.get("value") for e in vllm_container(leader(warm))["env"]}
    cold_env = {e["name"]: e.get("value") for e in vllm_container(leader(cold))["env"]}
    # Hashed into vLLM's compile-cache key: must not differ between the cold and the warm start.
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == cold_env["VLLM_ENGINE_READY_TIMEOUT_S"] == str(cold.startup_budget_s)
    overridden = config_for(k3_plan(), spec(startup_budget_minutes=30))
    assert render_rollout(overridden, target_for(overridden, warm=True)).startup_budget_s == 1800


def test_a_measured_start_of_the_same_shape_sets_the_prediction_and_budget_but_not_vllms_own_timeout() -> None:
    config = config_for(k3_plan())
    modelled = render_rollout(config, target_for(config))
    start = MeasuredStart(to_listening_s=5_400.0, measured_at=datetime(2026, 12, 5, 13, 0, tzinfo=UTC),
                          campaign_id="k3-first", revision_sha="a" * 40)
    measured = render_rollout(config, target_for(config).model_copy(update={"measured_start": start}))
    assert (measured.expected_start_s, measured.startup_budget_s) == (5_400.0, 8_100)  # 1.5 × the measured start
    assert measured.expected_basis == "measured cold start of campaign k3-first on 2026-12-05 13:00 UTC"
    assert modelled.expected_basis == "time model" and modelled.expected_start_s != 5_400.0
    env = {e["name"]: e.get("value") for e in vllm_container(leader(measured))["env"]}
    modelled_env = {e["name"]: e.get("value") for e in vllm_container(leader(modelled))["env"]}
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == modelled_env["VLLM_ENGINE_READY_TIMEOUT_S"]  # the cache key holds


def test_a_new_revision_is_the_same_shape_a_new_image_or_instance_type_is_not() -> None:
    config = config_for(k3_plan())
    key = shape_key(config, "nvme")
    assert shape_key(config.model_copy(update={"revision_sha": "b" * 40}), "nvme") == key
    assert shape_key(config.model_copy(update={"image": "vllm/vllm-openai:v0.33.0"}), "nvme") != key
    assert shape_key(config.model_copy(update={"instance_type": "p6-b200.48xlarge"}), "nvme") != key
    assert shape_key(config, "fsx") != key


# ------------------------------------------------------------------ secrets


@pytest.mark.parametrize("plan_name", ["one", "ep16"])
def test_the_api_key_is_in_no_rendered_object_but_its_secret(plan_name: str) -> None:
    plan = k3_plan() if plan_name == "one" else k3_ep16_on_two_b200()
    config = config_for(plan)
    rendered = render_rollout(config, target_for(config))
    secret = api_key_secret(rendered.namespace, "k3-demo", KEY)
    raw = KEY.get_secret_value()
    for obj in all_objects(rendered)[:-1]:
        assert raw not in json.dumps(obj)
    assert raw not in rendered.model_dump_json()
    assert raw not in json.dumps(redact_for_disk(secret))
    assert redact_for_disk(secret)["data"] == {"api-key": "<redacted>"}
    # The leader reads it by reference and passes the reference on its command line.
    container = vllm_container(leader(rendered))
    (env,) = [e for e in container["env"] if e["name"] == "VLLM_API_KEY"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "serving-api-key", "key": "api-key"}
    assert "--api-key=$(VLLM_API_KEY)" in container["args"]  # one token: a key beginning with "-" stays its value
    assert secret["metadata"]["name"] == "serving-api-key"


def test_the_one_service_selects_the_leader() -> None:
    config = config_for(k3_plan(), spec())
    rendered = render_rollout(config, target_for(config, color="green"))
    (cluster_ip,) = rendered.services
    assert cluster_ip["metadata"]["name"] == "serving"  # never "vllm": that would inject VLLM_PORT=tcp://…
    assert cluster_ip["spec"]["selector"] == {"capserve.io/rollout": "vllm-green", "capserve.io/role": "leader"}
    assert cluster_ip["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert leader(rendered)["metadata"]["labels"]["capserve.io/role"] == "leader"
    assert leader(rendered)["spec"]["enableServiceLinks"] is False


# ------------------------------------------------------------------ compile caches


def test_cache_env_init_container_and_save_job() -> None:
    config = config_for(k3_plan("p6-b200.48xlarge"))
    rendered = render_rollout(config, target_for(config))
    assert rendered.cache_uri == f"s3://capserve-weights/capserve/weights/compile-cache/{config.cache_key}/"
    env = {e["name"]: e.get("value") for e in vllm_container(worker(rendered))["env"]}
    assert env["VLLM_CACHE_ROOT"] == "/cache/node-$(LWS_WORKER_INDEX)/vllm"
    assert env["FLASHINFER_WORKSPACE_BASE"].startswith("/cache/") and env["CUDA_CACHE_PATH"].startswith("/cache/")
    prepare = leader(rendered)["spec"]["initContainers"][0]
    prepare_env = {e["name"]: e["value"] for e in prepare["env"]}
    assert prepare["image"].startswith("public.ecr.aws/aws-cli/aws-cli")
    assert prepare_env["CACHE_URI"] == f"{rendered.cache_uri}node-0/" and prepare_env["CACHE_ENABLED"] == "true"
    assert prepare_env["EXPECTED_NODE"] == ""  # TP×PP: every node holds every expert, nothing to check
    job = render_cache_save_job(campaign_id="k3-demo", namespace=rendered.namespace, color="blue",
                                key=config.cache_key, uri=rendered.cache_uri, node_index=1, kube_node="ip-b")
    job_env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job_env["CACHE_URI"] == f"{rendered.cache_uri}node-1/" and job_env["CACHE_DIR"] == "/cache/node-1"
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "ip-b"}
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    # The marker goes up last: a half-saved cache is never taken for a complete one.
    assert script.index("aws s3 sync") < script.index('aws s3 cp --only-show-errors "$CACHE_DIR/$CACHE_MARKER"')


def test_cache_off_and_outcomes() -> None:
    config = config_for(k3_plan(), spec(compile_cache=False))
    rendered = render_rollout(config, target_for(config, warm=True))
    env = {e["name"]: e["value"] for e in leader(rendered)["spec"]["initContainers"][0]["env"]}
    assert env["CACHE_ENABLED"] == "false"
    cold = render_rollout(config_for(k3_plan()), target_for(config_for(k3_plan()), warm=False))
    assert rendered.startup_budget_s == cold.startup_budget_s  # caching off: a warm flag cannot shorten the budget
    assert cache_outcome("restoring…\nCAPSERVE_COMPILE_CACHE=hit source=s3\n") == "hit"
    assert cache_outcome("CAPSERVE_COMPILE_CACHE=miss") == "miss" and cache_outcome("nothing") is None


def test_two_revisions_with_the_same_config_share_the_compile_cache_key() -> None:
    """The graphs of a new revision of the same architecture are the same; only the weights change. The old key
    held the revision, so every new revision found no cache."""
    config = {"architectures": ["KimiK3ForConditionalGeneration"], "num_hidden_layers": 93, "torch_dtype": "bfloat16"}
    digest = compile_config_digest(config)
    first = config_for(k3_plan(), model_config_digest=digest)
    second = config_for(k3_plan(), model_config_digest=digest).model_copy(update={"revision_sha": "b" * 40})
    assert first.cache_key == second.cache_key
    assert first.revision != second.revision  # still two configurations (labels, rollback)
    # What transformers drops before vLLM hashes the config changes nothing.
    assert compile_config_digest({**config, "_name_or_path": "/x", "transformers_version": "9.9"}) == digest


def test_what_changes_the_compiled_graphs_changes_the_compile_cache_key() -> None:
    config = {"architectures": ["KimiK3ForConditionalGeneration"], "num_hidden_layers": 93, "torch_dtype": "bfloat16"}
    base = config_for(k3_plan(), model_config_digest=compile_config_digest(config))
    layers = config_for(k3_plan(), model_config_digest=compile_config_digest({**config, "num_hidden_layers": 61}))
    quantized = config_for(k3_plan(), model_config_digest=compile_config_digest(
        {**config, "quantization_config": {"quant_method": "mxfp4"}}))
    vllm = config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0"), model_config_digest=base.model_config_digest)
    flag = config_for(k3_plan(), spec(extra_args=[*K3_RECIPE_ARGS, "--enforce-eager"]),
                      model_config_digest=base.model_config_digest)
    keys = {c.cache_key for c in (base, layers, quantized, vllm, flag)}
    assert len(keys) == 5
    # Without a config.json digest, nothing says two revisions share an architecture: the revision stands in.
    unread = config_for(k3_plan())
    assert unread.cache_key != unread.model_copy(update={"revision_sha": "b" * 40}).cache_key


def test_cache_key_follows_image_model_and_layout_but_not_replicas() -> None:
    base = config_for(k3_plan())
    assert base.cache_key == config_for(k3_plan(), spec(replicas=2)).cache_key
    assert base.cache_key != config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0")).cache_key
    assert base.cache_key != config_for(k3_plan("p6-b200.48xlarge")).cache_key
    pinned = config_for(k3_plan(), image_digest="sha256:" + "a" * 64)
    assert pinned.image_ref == "vllm/vllm-openai:kimi-k3@sha256:" + "a" * 64 and pinned.cache_key != base.cache_key
    assert base.revision != pinned.revision and len(base.revision) == 10


def test_the_demo_spec_renders_without_a_conflict() -> None:
    from pathlib import Path

    from rollout_fixtures import config_for as make_config

    from capserve.core.spec import load_spec

    demo = load_spec(Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml")
    config = make_config(k3_plan(), demo)
    rendered = render_rollout(config, target_for(config))
    assert "--trust-remote-code" in rendered.leader_args and rendered.leader_args.count("--kv-cache-dtype") == 1


def test_the_pods_pull_the_ecr_copy_by_digest_and_share_the_upstream_digests_caches() -> None:
    digest = "sha256:" + "b" * 64
    mirrored = ImageMirrorResult(
        source="vllm/vllm-openai:kimi-k3", digest=digest, region="us-east-2",
        repository="capserve/k3-demo/vllm/vllm-openai", copied=True,
        image=f"123456789012.dkr.ecr.us-east-2.amazonaws.com/capserve/k3-demo/vllm/vllm-openai@{digest}",
    )  # fmt: skip
    config = config_for(k3_plan(), image=mirrored.image)
    rendered = render_rollout(config, target_for(config))

    assert vllm_container(leader(rendered))["image"] == mirrored.image == rendered.image
    assert config.pinned_digest == digest
    # The same bytes pinned upstream compile the same code: the compile cache is shared.
    assert config.cache_key == config_for(k3_plan(), image_digest=digest).cache_key
