"""The kubelet never reports a container running with nothing behind it: a process the OS will not make is the
container runtime's StartError (terminated, exit code 128, runc's message; containerd pkg/cri/server/helpers.go),
a container ends when its main process ends even if a child still holds its output (pid_namespaces(7): the
namespace dies with its init), and a failure inside the fake ends the containers it strands, visibly."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from capserve_sandbox.kube import FakeKube
from capserve_sandbox.kube.kubelet import runtimes, worker
from kubernetes import client as k8s
from kubernetes import watch as kube_watch

from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import container_status, events, get, pod, until
from tests.sandbox.test_kubelet import alive, stage_model, vllm_pod

TOOL = "public.ecr.aws/aws-cli/aws-cli:2.27.50"


def tool_pod(name: str, script: str, *, init: bool = False, restart: str = "Never") -> dict[str, Any]:
    body = pod(name, restartPolicy=restart)
    container = {"name": "work", "image": TOOL, "command": ["/bin/sh", "-c", script]}
    if init:
        body["spec"]["initContainers"] = [container]
    else:
        body["spec"]["containers"] = [container]
    return body


def init_status(obj: dict[str, Any], name: str = "work") -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("initContainerStatuses") or [] if c["name"] == name), {})


@pytest.fixture
def refuse_spawn(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, int], None]:
    """Make the OS refuse the next ``times`` processes whose command line mentions ``marker`` (fork's EAGAIN),
    at the event loop's own ``subprocess_exec``, under whatever the kubelet calls."""
    refusals: dict[str, int] = {}
    real = asyncio.base_events.BaseEventLoop.subprocess_exec

    async def subprocess_exec(self: Any, factory: Any, program: Any, *args: Any, **kwargs: Any) -> Any:
        command = " ".join(str(a) for a in (program, *args))
        for marker, left in refusals.items():
            if left and marker in command:
                refusals[marker] = left - 1
                raise BlockingIOError(11, "Resource temporarily unavailable")
        return await real(self, factory, program, *args, **kwargs)

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "subprocess_exec", subprocess_exec)
    return lambda marker, times: refusals.__setitem__(marker, times)


def test_a_container_whose_process_cannot_be_made_ends_with_the_runtimes_start_error(
    kube: FakeKube, api: k8s.ApiClient, refuse_spawn: Callable[[str, int], None]
) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    refuse_spawn("echo prepared", 1)
    tasks_kube.apply(api, tool_pod("refused", "echo prepared", init=True))

    failed = until(kube, lambda: get(kube, "pods", "refused") if get(kube, "pods", "refused")["status"].get(
        "phase") == "Failed" else None, what="the pod failed")
    terminated = init_status(failed)["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"], terminated["startedAt"]) == (
        "StartError", 128, "1970-01-01T00:00:00Z"
    )
    assert terminated["message"] == (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: "
        "[Errno 11] Resource temporarily unavailable"
    )
    assert [e["message"] for e in events(kube, "refused", "Failed")] == [f"Error: {terminated['message']}"]
    assert not events(kube, "refused", "Started")


def test_a_command_that_does_not_exist_is_a_start_error_naming_it(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    body = tool_pod("missing", "unused")
    body["spec"]["containers"][0]["command"] = ["/opt/capserve-no-such-program"]
    tasks_kube.apply(api, body)

    ended = until(kube, lambda: container_status(get(kube, "pods", "missing"), "work").get("state", {}).get(
        "terminated"), what="the container ended")
    assert (ended["reason"], ended["exitCode"]) == ("StartError", 128)
    assert ended["message"].endswith(
        'error during container init: exec: "/opt/capserve-no-such-program": stat /opt/capserve-no-such-program: '
        "no such file or directory"
    )


def test_a_refused_start_is_restarted_after_its_back_off_and_then_runs(
    kube: FakeKube, api: k8s.ApiClient, refuse_spawn: Callable[[str, int], None]
) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    refuse_spawn("sleep 600", 1)
    tasks_kube.apply(api, tool_pod("retried", "sleep 600", restart="Always"))

    running = until(kube, lambda: container_status(get(kube, "pods", "retried"), "work").get("state", {}).get(
        "running") and container_status(get(kube, "pods", "retried"), "work"), what="the second start running")
    assert running["restartCount"] == 1
    assert events(kube, "retried", "Failed")[0]["message"].startswith("Error: failed to create containerd task:")
    process = kube.kubelet.workers[get(kube, "pods", "retried")["metadata"]["uid"]].apps[0].runtime.process
    assert process is not None and process.pid is not None and alive(process.pid)


def test_a_container_ends_with_its_main_process_though_a_child_still_holds_its_output(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    # The shell exits at once; its background child would keep the output pipe open for ten minutes.
    tasks_kube.apply(api, tool_pod("left", "sleep 600 & echo child $!; exit 3"))

    ended = until(kube, lambda: container_status(get(kube, "pods", "left"), "work").get("state", {}).get(
        "terminated"), what="the container ended with its shell")
    assert (ended["exitCode"], ended["reason"]) == (3, "Error")
    log = k8s.CoreV1Api(api).read_namespaced_pod_log("left", "default", container="work")
    child = int(re.search(r"child (\d+)", log).group(1))  # type: ignore[union-attr]
    until(kube, lambda: not alive(child), what="the child killed with its container")


def test_a_vllm_server_that_cannot_be_started_ends_its_container_instead_of_running_without_it(
    kube: FakeKube, api: k8s.ApiClient, refuse_spawn: Callable[[str, int], None]
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    refuse_spawn("capserve_sandbox.openai_server", 1)
    body = vllm_pod("server", probes=False)
    body["spec"]["restartPolicy"] = "Never"
    core = k8s.CoreV1Api(api)
    since = core.list_namespaced_pod("default").metadata.resource_version
    tasks_kube.apply(api, body)

    # Every status the API server stored, in order: the first that shows the container ended already says the
    # pod failed (the kubelet's getPhase), so no watcher ever sees a Running pod with nothing left to run.
    first_ended = None
    for event in kube_watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=since,
                                           field_selector="metadata.name=server", timeout_seconds=120):
        pod = event["object"]
        statuses = pod.status.container_statuses or []
        if statuses and statuses[0].state.terminated is not None:
            first_ended = pod
            break
    assert first_ended is not None, "the vLLM container never ended"
    terminated = first_ended.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code, first_ended.status.phase) == ("StartError", 128, "Failed")


def test_a_container_the_fake_loses_track_of_is_reported_ended_and_restarted(
    kube: FakeKube, api: k8s.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (node,) = kube.provision_nodes("gpu", 1)
    stage_model(kube, node)
    failures = [RuntimeError("dictionary changed size during iteration")]
    real = runtimes.VllmRuntime._serve_when_ready

    async def serve_when_ready(self: runtimes.VllmRuntime, host_model: Any) -> None:
        if failures:
            raise failures.pop()
        await real(self, host_model)

    monkeypatch.setattr(runtimes.VllmRuntime, "_serve_when_ready", serve_when_ready)
    tasks_kube.apply(api, vllm_pod("lost", probes=False))

    def restarted() -> dict[str, Any] | None:
        status = container_status(get(kube, "pods", "lost"))
        return status if status.get("restartCount") and "running" in status.get("state", {}) else None

    assert until(kube, restarted, what="the lost container restarted")["restartCount"] == 1
    assert events(kube, "lost", "Failed")[0]["message"] == (
        "Error: the sandbox kubelet lost the container: RuntimeError('dictionary changed size during iteration')"
    )


def test_a_pod_whose_worker_fails_inside_the_fake_ends_failed_not_pending(
    kube: FakeKube, api: k8s.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("dictionary changed size during iteration")

    monkeypatch.setattr(worker, "resolve_env", broken)
    tasks_kube.apply(api, tool_pod("stranded", "echo never", init=True, restart="Always"))

    failed = until(kube, lambda: get(kube, "pods", "stranded") if get(kube, "pods", "stranded")["status"].get(
        "phase") == "Failed" else None, what="the pod failed")
    terminated = init_status(failed)["state"]["terminated"]
    assert terminated["message"] == (
        "the sandbox kubelet failed: RuntimeError('dictionary changed size during iteration')"
    )
    assert container_status(failed)["state"]["terminated"]["reason"] == "Error"


def test_a_recreated_leader_keeps_its_group_when_the_old_one_stops(kube: FakeKube) -> None:
    old = kube.kubelet.vllm_group_open("ns", "vllm-blue-0", object(), 1)
    new = kube.kubelet.vllm_group_open("ns", "vllm-blue-0", object(), 1)  # same name, the new pod's

    kube.kubelet.vllm_group_close("ns", "vllm-blue-0", old)

    assert kube.kubelet.vllm_group(("ns", "vllm-blue-0")) is new

