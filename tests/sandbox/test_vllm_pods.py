"""vLLM pods in the sandbox: arguments checked as vLLM checks them, the model folder as vLLM reads it,
the API key enforced, and a multi-node group that starts only when every rank has joined."""

from __future__ import annotations

import json
from typing import Any

from capserve_sandbox.kube import FakeKube
from kubernetes import client as k8s
from kubernetes.stream import portforward

from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import container_status, events, get, install_lws, until, until_answered
from tests.sandbox.test_kubelet import MODEL_DIR, http_get, ready, stage_model, vllm_pod


def crash_log(kube: FakeKube, api: k8s.ApiClient, name: str, container: str = "main") -> str:
    """The output of the container's last failed run, once it is back-off-restarting (as the kubelet does,
    the current log is the terminated container's until the next one starts)."""

    def backing_off() -> bool:
        found = kube.store.objects.get(("", "pods", "default", name))
        state = (container_status(found, container) if found else {}).get("state") or {}
        return (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"

    until(kube, backing_off, what=f"{name} in CrashLoopBackOff")
    log: str = k8s.CoreV1Api(api).read_namespaced_pod_log(name, "default", container=container)
    return log


def test_an_unknown_flag_crash_loops_with_the_flag_in_the_log(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("typo", "--tensor-paralel-size", "8"))
    log = crash_log(kube, api, "typo")
    assert "vllm: error: unrecognized arguments: --tensor-paralel-size 8" in log
    last = container_status(get(kube, "pods", "typo"))["lastState"]["terminated"]
    assert last["exitCode"] == 2 and last["reason"] == "Error"  # argparse's exit code
    assert events(kube, "typo", "BackOff")


def test_a_malformed_value_is_refused_like_vllm_refuses_it(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("choice", "--kv-cache-dtype", "fp9"))
    assert "argument --kv-cache-dtype: invalid choice: 'fp9'" in crash_log(kube, api, "choice")


def test_a_model_folder_missing_a_shard_crashes_naming_it(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    host = stage_model(kube, node, files=("model-00001.safetensors",))
    index = {"weight_map": {"a": "model-00001.safetensors", "b": "model-00002.safetensors"}}
    (host / "model.safetensors.index.json").write_text(json.dumps(index))
    tasks_kube.apply(api, vllm_pod("shard"))
    log = crash_log(kube, api, "shard")
    assert f"No such file or directory: '{MODEL_DIR}/model-00002.safetensors'" in log


def test_a_model_path_outside_every_mount_is_not_a_model(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    elsewhere = vllm_pod("elsewhere")
    elsewhere["spec"]["containers"][0]["args"][0] = "/models/k3"
    tasks_kube.apply(api, elsewhere)
    assert "Invalid repository ID or local directory specified: '/models/k3'" in crash_log(kube, api, "elsewhere")


def test_the_api_key_from_a_secret_is_enforced(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "endpoint", "namespace": "default"},
            "stringData": {"key": "s3cr3t"},
        },
    )
    keyed = vllm_pod(
        "keyed",
        "--api-key",
        "$(VLLM_API_KEY)",
        env=[{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "endpoint", "key": "key"}}}],
    )
    tasks_kube.apply(api, keyed)
    until(kube, lambda: ready(kube, "keyed"))
    assert http_get(api, "keyed", "/health")[0] == 200  # probes need no key
    assert http_get(api, "keyed", "/v1/models")[0] == 401
    assert http_get(api, "keyed", "/v1/models", key="wrong")[0] == 401
    assert http_get(api, "keyed", "/v1/models", key="s3cr3t")[0] == 200
    log = k8s.CoreV1Api(api).read_namespaced_pod_log("keyed", "default")
    assert "s3cr3t" not in log and "'api_key': '<hidden>'" in log


def chat(api: k8s.ApiClient, name: str, body: dict[str, Any], port: int = 8000) -> tuple[int, dict[str, Any]]:
    """POST /v1/chat/completions (not streamed) through the API server's port-forward."""
    forward = portforward(k8s.CoreV1Api(api).connect_get_namespaced_pod_portforward, name, "default", ports=str(port))
    sock = forward.socket(port)
    sock.setblocking(True)
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: pod\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    status, _, answer = data.decode().partition("\r\n\r\n")
    return int(status.split()[1]), json.loads(answer)


WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def test_a_tool_call_parser_without_auto_tool_choice_answers_tool_choice_auto_with_vllms_400(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("parser-only", "--tool-call-parser", "kimi_k3"))
    until(kube, lambda: ready(kube, "parser-only"))
    request = {"model": "kimi-k3", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER_TOOL]}

    status, answer = chat(api, "parser-only", {**request, "tool_choice": "auto"})

    assert status == 400 and answer["error"]["type"] == "BadRequestError"
    assert answer["error"]["message"] == (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    assert chat(api, "parser-only", request)[0] == 400  # tools without a tool_choice mean "auto" to vLLM
    assert chat(api, "parser-only", {**request, "tool_choice": "none"})[0] == 200


def test_auto_tool_choice_with_its_parser_serves_tool_choice_auto(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("tools", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3"))
    until(kube, lambda: ready(kube, "tools"))
    request = {"model": "kimi-k3", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER_TOOL]}
    status, answer = chat(api, "tools", {**request, "tool_choice": "auto"})
    assert status == 200 and answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_auto_tool_choice_without_a_parser_does_not_start(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("no-parser", "--enable-auto-tool-choice"))
    assert "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser" in crash_log(
        kube, api, "no-parser"
    )
    last = container_status(get(kube, "pods", "no-parser"))["lastState"]["terminated"]
    assert last["exitCode"] == 1


def test_a_tool_parser_vllm_does_not_register_does_not_start(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("typo-parser", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k9"))
    assert "requires tool_parser:'kimi_k9' which has not been registered" in crash_log(kube, api, "typo-parser")


# ----------------------------------------------------------------------------- two nodes, one server


def two_node_lws(name: str, worker_tp: int = 8) -> dict[str, Any]:
    def container(extra: list[str]) -> dict[str, Any]:
        return {
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.32.0",
            "command": [
                "sh",
                "-c",
                " ".join(
                    [
                        "vllm serve",
                        MODEL_DIR,
                        "--served-model-name kimi-k3",
                        "--nnodes $(LWS_GROUP_SIZE)",
                        "--node-rank $(LWS_WORKER_INDEX)",
                        "--master-addr $(LWS_LEADER_ADDRESS)",
                        *extra,
                    ]
                ),
            ],
            "ports": [{"containerPort": 8000}],
            "volumeMounts": [{"name": "weights", "mountPath": "/mnt/k8s-disks/0/weights"}],
        }

    volumes = [{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/weights", "type": "Directory"}}]
    leader = {
        "spec": {
            "containers": [
                {
                    **container(["--tensor-parallel-size 8", "--pipeline-parallel-size 2"]),
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                }
            ],
            "volumes": volumes,
        }
    }
    worker = {
        "spec": {
            "containers": [
                container([f"--tensor-parallel-size {worker_tp}", "--pipeline-parallel-size 2", "--headless"])
            ],
            "volumes": volumes,
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "leaderTemplate": leader, "workerTemplate": worker},
        },
    }


def test_the_leader_serves_once_its_headless_worker_joined(kube: FakeKube, api: k8s.ApiClient) -> None:
    nodes = kube.provision_nodes("gpu", 2)
    for node in nodes:
        stage_model(kube, node)
    install_lws(kube, api)
    tasks_kube.apply(api, two_node_lws("k3"))
    until(
        kube,
        lambda: (
            (get(kube, "leaderworkersets", "k3", "leaderworkerset.x-k8s.io").get("status") or {}).get("readyReplicas")
            == 1
        ),
        what="the group ready",
    )
    v1 = k8s.CoreV1Api(api)
    leader_log = v1.read_namespaced_pod_log("k3-0", "default")
    assert "Waiting for 1 remote engine node(s)" in leader_log and "All 1 remote engine node(s) connected" in leader_log
    assert "Headless rank 1 joined k3-0.k3.default" in v1.read_namespaced_pod_log("k3-0-1", "default")
    assert http_get(api, "k3-0", "/v1/models")[0] == 200


def test_a_worker_whose_layout_differs_from_its_leader_crashes(kube: FakeKube, api: k8s.ApiClient) -> None:
    nodes = kube.provision_nodes("gpu", 2)
    for node in nodes:
        stage_model(kube, node)
    install_lws(kube, api)
    odd = two_node_lws("odd", worker_tp=4)
    odd["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"  # keep the crashing worker (no group rebuild)
    tasks_kube.apply(api, odd)
    why = "this rank's parallel layout differs from its leader's"
    log = crash_log(kube, api, "odd-0-1", container="vllm")
    if why not in log:
        # On a busy machine the back-off may end before the log is read: this is then the next run's log,
        # which crashes the same way once it has compared its layout with the leader's.
        def worker_log() -> str:
            return str(k8s.CoreV1Api(api).read_namespaced_pod_log("odd-0-1", "default", container="vllm"))

        until_answered(lambda: why in worker_log(), what="the worker's next run to crash the same way")
        log = worker_log()
    assert why in log and "'tensor_parallel_size': (4, 8)" in log
    assert not ready(kube, "odd-0")  # the leader never listens: its engines never all joined
    assert get(kube, "pods", "odd-0")["status"]["phase"] == "Running"  # ...though its container runs
