"""The rollout's tasks against the sandbox's Kubernetes: the port-forward, the watch-wait and its diagnoses."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

import httpx
import pytest
from capserve_sandbox.kube import FakeKube, Fault, FaultKind
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.core.progress import PREFIX, unstamped
from capserve.core.rollout.diagnosis import Trouble
from capserve.core.rollout.result import RolloutFailedError
from capserve.core.rollout.settings import RolloutWaitSettings
from capserve.tasks import kube as tasks_kube
from capserve.tasks.rollout import wait as rollout_wait
from capserve.tasks.rollout.access import check_endpoint, port_forward
from capserve.tasks.rollout.objects import ensure_api_key
from capserve.tasks.rollout.wait import wait_rollout_ready
from tests.sandbox.conftest import GPU_TAINT, events, install_lws
from tests.sandbox.test_kubelet import stage_model, vllm_pod

NO_PAUSE = RolloutWaitSettings(endpoint_check_retry_s=0)
FAST = RolloutWaitSettings(unschedulable_grace_s=1.0, crash_restarts=2, pull_and_schedule_allowance_s=30)


def labelled(name: str, *args: str, **container: Any) -> dict[str, Any]:
    made = vllm_pod(name, *args, **container)
    made["metadata"]["labels"]["capserve.io/rollout"] = "vllm-blue"
    return made


def wait(api: k8s.ApiClient, budget_s: float = 30.0) -> Any:
    return wait_rollout_ready.fn(
        api, "default", "vllm-blue", 1, budget_s=budget_s, wait=FAST, kube=KubeSettings(watch_window_s=5)
    )


def test_the_wait_watches_until_ready_and_the_port_forward_reaches_the_server(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    kube.inject(Fault(FaultKind.SLOW_START, pod="p", seconds=600))  # 1 s of wall time
    tasks_kube.apply(api, labelled("p"))
    ready = wait(api)
    assert ready.ready_after_s > 0 and len(ready.pods) == 1
    # A watch, not a poll: a list and a few watch requests, not one per probe period.
    assert 1 <= ready.api_calls <= 10
    with port_forward(api, "default", "p", 8000) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        assert check_endpoint(url, SecretStr("anything"), "kimi-k3") is None  # this pod enforces no key
        assert "not 'other'" in (check_endpoint(url, SecretStr("k"), "other") or "")

        # Many connections at once (the load profile): each gets its own stream.
        def models(_: int) -> int:
            return httpx.get(f"{url}/v1/models", timeout=30).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            assert set(pool.map(models, range(48))) == {200}
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/health", timeout=2)  # the listener closed with the block


def test_the_api_key_is_generated_once_and_kept(kube: FakeKube, api: k8s.ApiClient) -> None:
    first = ensure_api_key.fn(api, "default", "c1")
    again = ensure_api_key.fn(api, "default", "c1")
    assert first.get_secret_value() == again.get_secret_value() and len(first.get_secret_value()) >= 32


@pytest.mark.parametrize(
    ("fault", "trouble", "words"),
    [
        (Fault(FaultKind.IMAGE_PULL, pod="p"), Trouble.IMAGE_PULL, "ImagePullBackOff"),
        (Fault(FaultKind.CRASH_LOOP, pod="p"), Trouble.CRASH_LOOP, "injected crash"),
        (Fault(FaultKind.OOM, pod="p"), Trouble.OOM_KILLED, "OOMKilled"),
        (Fault(FaultKind.SLOW_START, pod="p", seconds=6 * 3600), Trouble.STARTUP_PROBE, "startup probe"),
    ],
)
def test_each_fault_ends_the_wait_with_its_diagnosis(
    kube: FakeKube, api: k8s.ApiClient, fault: Fault, trouble: Trouble, words: str
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    kube.inject(fault)
    tasks_kube.apply(api, labelled("p"))
    with pytest.raises(RolloutFailedError) as failed:
        wait(api, budget_s=120)
    assert failed.value.diagnosis.trouble is trouble
    assert words in str(failed.value) and "Fix:" in str(failed.value)


def test_a_leader_that_fails_on_every_start_fails_the_wait_although_its_group_is_recreated_each_time(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    """LWS replaces a group whose container restarted: each new leader starts at restartCount 0, so a count of
    restarts alone never reached the crash-loop threshold and the wait ran out its whole startup budget."""
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    install_lws(kube, api)
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="vllm-blue-0"))  # exits on every start, as a refused flag does
    leader = {"metadata": {"labels": {"capserve.io/rollout": "vllm-blue"}},
              "spec": {"containers": [{"name": "vllm", "image": "registry.k8s.io/pause:3.10"}]}}
    tasks_kube.apply(api, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm-blue", "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": leader}},
    })
    with pytest.raises(RolloutFailedError) as failed:
        wait(api, budget_s=600)
    assert events(kube, "vllm-blue", "RecreateGroupOnPodRestart")  # the group was recreated on the way
    assert failed.value.diagnosis.trouble is Trouble.CRASH_LOOP and failed.value.diagnosis.fatal
    assert "by its LeaderWorkerSet recreating the pod" in str(failed.value)


def test_an_unschedulable_pod_fails_after_its_grace_with_the_schedulers_reason(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    kube.provision_nodes("gpu", 1, taints=[GPU_TAINT])  # the pod tolerates nothing
    tasks_kube.apply(api, labelled("p"))
    with pytest.raises(RolloutFailedError) as failed:
        wait(api)
    assert failed.value.diagnosis.trouble is Trouble.UNSCHEDULABLE
    assert "untolerated taint {nvidia.com/gpu: true}" in str(failed.value)


def test_the_endpoint_check_tries_a_dropped_connection_again_but_not_a_wrong_answer() -> None:
    """A stream that drops before an answer says nothing about the pod (a failed check tears down)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Flaky(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            if len(seen) == 1:
                self.close_connection = True  # no answer at all: the client sees the connection drop
                return
            body = json.dumps({"data": [{"id": "kimi-k3"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert check_endpoint(url, SecretStr("k"), "kimi-k3", NO_PAUSE) is None
        assert len(seen) == 2
        assert "not 'other'" in (check_endpoint(url, SecretStr("k"), "other", NO_PAUSE) or "")
        assert len(seen) == 3  # an answer, even a wrong one, is not asked again
    finally:
        server.shutdown()
        server.server_close()


def test_a_pod_gone_while_unschedulable_leaves_no_grace_behind() -> None:
    """Its grace end, kept, would lie in the past for good, and the wait would watch in a busy loop."""
    from capserve.tasks.rollout.wait import _Judge

    def pod(name: str, scheduled: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable"}]}}

    judge = _Judge(None, "capserve", 1, RolloutWaitSettings(), KubeSettings())  # type: ignore[arg-type]
    judge.judge([pod("vllm-blue-0", "False")])
    assert judge.next_grace_end() is not None
    judge.judge([pod("vllm-blue-0-replaced", "True")])
    assert judge.next_grace_end() is None and not judge.found


def test_the_wait_tells_the_image_pull_and_vllms_phase_against_the_expected_start(
    kube: FakeKube, api: k8s.ApiClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    kube.inject(Fault(FaultKind.SLOW_START, pod="vllm-blue-0", seconds=1200))  # 2 s of wall time
    monkeypatch.setattr(rollout_wait, "REPORT_EVERY_S", 0.1)  # look often: the start is short here
    leader = labelled("vllm-blue-0")
    leader["spec"]["containers"][0]["name"] = "vllm"  # the container the rollout renders
    tasks_kube.apply(api, leader)
    with caplog.at_level(logging.INFO, logger="capserve.tasks.progress"):
        wait_rollout_ready.fn(
            api, "default", "vllm-blue", 1, budget_s=30.0, wait=FAST, kube=KubeSettings(watch_window_s=5),
            expected_s=1200.0,
        )
    lines = [unstamped(r.getMessage().removeprefix(PREFIX))[1] for r in caplog.records
             if r.getMessage().startswith(PREFIX)]
    assert any(line.startswith("image pull: ") and line.endswith(" pulled") for line in lines), lines
    assert any(line.startswith("vLLM startup: ") and "of ~20 min expected" in line for line in lines), lines
    assert len(lines) == len(set(lines))  # one line per change, not one per look
