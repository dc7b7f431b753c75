"""The local kubelet: probes drive Ready, faults show the statuses the real kubelet reports, logs and
port-forward go through the official client, and no process outlives its pod."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from capserve_sandbox.kube import FakeKube, Fault, FaultKind, fake_kube
from kubernetes import client as k8s
from kubernetes.stream import portforward

from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import condition, container_status, events, get, pod, until

MODEL_DIR = "/mnt/k8s-disks/0/weights/model"


def stage_model(kube: FakeKube, node: str, files: tuple[str, ...] = ("model-00001.safetensors",)) -> Path:
    """What a staging Job leaves on the node: a config, an index and every file it names."""
    host = kube.kubelet.layout.host_path(node, MODEL_DIR)
    host.mkdir(parents=True, exist_ok=True)
    (host / "config.json").write_text("{}")
    (host / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": files[0]}}))
    for name in files:
        (host / name).write_bytes(b"\0" * 16)
    return host


def vllm_pod(name: str, *args: str, probes: bool = True, **container: Any) -> dict[str, Any]:
    main: dict[str, Any] = {
        "image": "vllm/vllm-openai:v0.32.0",
        "command": ["vllm", "serve"],
        "args": [MODEL_DIR, "--served-model-name", "kimi-k3", *args],
        "ports": [{"name": "http", "containerPort": 8000}],
        "volumeMounts": [{"name": "weights", "mountPath": "/mnt/k8s-disks/0/weights"}],
        **container,
    }
    if probes:
        main["startupProbe"] = {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 540,
        }  # 90 minutes, as for K3
        main["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    return pod(
        name,
        container=main,
        volumes=[{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/weights", "type": "Directory"}}],
    )


def http_get(api: k8s.ApiClient, name: str, path: str, port: int = 8000, key: str | None = None) -> tuple[int, str]:
    """A request through the API server's port-forward, as `kubectl port-forward` would carry it."""
    forward = portforward(k8s.CoreV1Api(api).connect_get_namespaced_pod_portforward, name, "default", ports=str(port))
    sock = forward.socket(port)
    sock.setblocking(True)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: pod\r\n{auth}Connection: close\r\n\r\n".encode())
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def ready(kube: FakeKube, name: str) -> bool:
    found = kube.store.objects.get(("", "pods", "default", name))
    return bool(found and (condition(found, "Ready") or {}).get("status") == "True")


# ----------------------------------------------------------------------------- probes


def test_probes_drive_ready_and_port_forward_reaches_the_process(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    kube.inject(Fault(FaultKind.SLOW_START, pod="vllm", seconds=600))  # listens after 10 minutes = 1 s
    tasks_kube.apply(api, vllm_pod("vllm"))
    until(kube, lambda: events(kube, "vllm", "Unhealthy"), what="a failed startup probe while loading")
    current = get(kube, "pods", "vllm")
    assert current["status"]["phase"] == "Running" and condition(current, "Ready")["status"] == "False"
    assert container_status(current)["started"] is False
    assert "connect: connection refused" in events(kube, "vllm", "Unhealthy")[0]["message"]
    until(kube, lambda: ready(kube, "vllm"), what="Ready once the server listens")
    assert container_status(get(kube, "pods", "vllm"))["restartCount"] == 0
    status, body = http_get(api, "vllm", "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "kimi-k3"


def test_an_exhausted_startup_probe_kills_and_restarts_the_container(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    kube.inject(Fault(FaultKind.SLOW_START, pod="slow", seconds=100_000))  # far beyond 540 x 10 s
    tasks_kube.apply(api, vllm_pod("slow"))
    until(kube, lambda: container_status(get(kube, "pods", "slow")).get("restartCount", 0) >= 1, timeout_s=30)
    [killed] = events(kube, "slow", "Killing")[:1]
    assert killed["message"] == "Container main failed startup probe, will be restarted"
    last = container_status(get(kube, "pods", "slow"))["lastState"]["terminated"]
    assert last["reason"] == "Error" and last["exitCode"] != 0


def test_readiness_on_a_port_nothing_serves_never_turns_ready(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    wrong = vllm_pod("wrong", probes=False, readinessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 5})
    tasks_kube.apply(api, wrong)
    until(kube, lambda: len(events(kube, "wrong", "Unhealthy")) >= 1)
    assert not ready(kube, "wrong")
    assert "dial tcp" in events(kube, "wrong", "Unhealthy")[0]["message"]


# ----------------------------------------------------------------------------- faults


def test_image_pull_error_then_back_off(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    kube.inject(Fault(FaultKind.IMAGE_PULL, image="registry.example/missing:*"))
    tasks_kube.apply(api, pod("pull", image="registry.example/missing:1"))
    seen: set[str] = set()

    def waiting_reasons() -> bool:
        statuses = get(kube, "pods", "pull")["status"].get("containerStatuses") or []
        if statuses and "waiting" in statuses[0]["state"]:
            seen.add(statuses[0]["state"]["waiting"]["reason"])
        return {"ErrImagePull", "ImagePullBackOff"} <= seen

    until(kube, waiting_reasons)
    assert get(kube, "pods", "pull")["status"]["phase"] == "Pending"
    assert any("Failed to pull image" in e["message"] for e in events(kube, "pull", "Failed"))


def test_crash_loop_and_oom_kill(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="crash"))
    kube.inject(Fault(FaultKind.OOM, pod="oom"))
    tasks_kube.apply(api, pod("crash"))
    tasks_kube.apply(api, pod("oom"))

    def backing_off(name: str) -> dict[str, Any] | None:
        status = container_status(get(kube, "pods", name))
        waiting = (status.get("state") or {}).get("waiting") or {}
        return status if waiting.get("reason") == "CrashLoopBackOff" and status.get("restartCount") else None

    crashed = until(kube, lambda: backing_off("crash"))
    assert (
        crashed["lastState"]["terminated"]["exitCode"] == 1 and crashed["lastState"]["terminated"]["reason"] == "Error"
    )
    assert events(kube, "crash", "BackOff")[0]["message"].startswith("Back-off restarting failed container main")
    killed = until(kube, lambda: backing_off("oom"))
    assert killed["lastState"]["terminated"] == {
        **killed["lastState"]["terminated"],
        "exitCode": 137,
        "reason": "OOMKilled",
    }
    logs = k8s.CoreV1Api(api).read_namespaced_pod_log("crash", "default", previous=True)
    assert "injected crash" in logs


def test_missing_secret_and_missing_host_directory_hold_the_pod(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    keyed = pod(
        "keyed", container={"env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}}]}
    )
    tasks_kube.apply(api, keyed)
    until(
        kube,
        lambda: (
            (container_status(get(kube, "pods", "keyed")).get("state", {}).get("waiting") or {}).get("reason")
            == "CreateContainerConfigError"
        ),
    )
    assert container_status(get(kube, "pods", "keyed"))["state"]["waiting"]["message"] == 'secret "api" not found'
    tasks_kube.apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "api", "namespace": "default"},
            "stringData": {"k": "v"},
        },
    )
    until(kube, lambda: get(kube, "pods", "keyed")["status"].get("phase") == "Running")

    missing = pod("nodir", volumes=[{"name": "d", "hostPath": {"path": "/mnt/k8s-disks/0", "type": "Directory"}}])
    tasks_kube.apply(api, missing)
    until(kube, lambda: events(kube, "nodir", "FailedMount"))
    assert (
        "hostPath type check failed: /mnt/k8s-disks/0 is not a directory"
        in events(kube, "nodir", "FailedMount")[0]["message"]
    )
    assert get(kube, "pods", "nodir")["status"]["phase"] == "Pending"


# ----------------------------------------------------------------------------- logs and port-forward


def test_pod_logs_through_the_official_client(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("logs"))
    until(kube, lambda: ready(kube, "logs"))
    v1 = k8s.CoreV1Api(api)
    full = v1.read_namespaced_pod_log("logs", "default", container="main")
    assert "vLLM API server version 0.32.0" in full and "'served_model_name': ['kimi-k3']" in full
    assert v1.read_namespaced_pod_log("logs", "default", tail_lines=1) == full.splitlines(keepends=True)[-1]
    with pytest.raises(k8s.ApiException) as no_previous:
        v1.read_namespaced_pod_log("logs", "default", previous=True)
    assert no_previous.value.status == 400 and "previous terminated container" in str(no_previous.value.body)
    with pytest.raises(k8s.ApiException) as missing:
        v1.read_namespaced_pod_log("nope", "default")
    assert missing.value.status == 404


def test_port_forward_to_a_port_nothing_serves_reports_the_error(kube: FakeKube, api: k8s.ApiClient) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    tasks_kube.apply(api, vllm_pod("pf"))
    until(kube, lambda: ready(kube, "pf"))
    forward = portforward(k8s.CoreV1Api(api).connect_get_namespaced_pod_portforward, "pf", "default", ports="9090")
    sock = forward.socket(9090)
    sock.setblocking(True)
    assert sock.recv(1024) == b""  # the kubelet closes the stream...
    assert "connection refused" in (forward.error(9090) or "")  # ...and says why on the error channel


# ----------------------------------------------------------------------------- processes


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped between the two looks
        return False


def server_pid(kube: FakeKube, name: str) -> int:
    pod_uid = get(kube, "pods", name)["metadata"]["uid"]
    runtime = kube.kubelet.workers[pod_uid].apps[0].runtime
    process = getattr(runtime, "process", None)
    assert process is not None and process.pid is not None
    return int(process.pid)


def test_no_process_outlives_its_pod_or_the_fake(tmp_path: Path) -> None:
    with fake_kube(time_scale=600, state_dir=tmp_path) as kube:
        client_api = tasks_kube.api_client(kube.url, None, lambda: __import__("pydantic").SecretStr(kube.token))
        (node,) = kube.provision_nodes("gpu", 1)
        stage_model(kube, node)
        for name in ("a", "b"):
            tasks_kube.apply(client_api, vllm_pod(name))
        until(kube, lambda: ready(kube, "a") and ready(kube, "b"))
        first, second = server_pid(kube, "a"), server_pid(kube, "b")
        k8s.CoreV1Api(client_api).delete_namespaced_pod("a", "default")
        until(kube, lambda: not alive(first), what="the deleted pod's process gone")
        assert alive(second)
        with socket.create_connection(
            ("127.0.0.1", kube.kubelet.workers[get(kube, "pods", "b")["metadata"]["uid"]].apps[0].runtime.ports[8000]),
            timeout=5,
        ):
            pass
    assert not alive(second)  # stopping the fake stopped the last pod's server
