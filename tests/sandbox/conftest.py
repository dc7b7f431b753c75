"""Fixtures for the sandbox's fake Kubernetes: a fast cluster, a client built by our code, small helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from capserve_sandbox.kube import FakeKube, fake_kube
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.tasks import kube as tasks_kube

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_LABELS = {"capserve.io/pool": "gpu"}
SYSTEM_LABELS = {"capserve.io/pool": "system"}


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    """Cluster time runs 600× faster: a 10 s probe period is 17 ms, a 10-minute deadline 1 s."""
    with fake_kube(time_scale=600) as server:
        yield server


@pytest.fixture
def api(kube: FakeKube) -> Iterator[k8s.ApiClient]:
    client = tasks_kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
    yield client
    client.close()


def pod(name: str, image: str = "registry.k8s.io/pause:3.10", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"containers": [container], **spec},
    }


def get(kube: FakeKube, plural: str, name: str, group: str = "", namespace: str | None = "default") -> dict[str, Any]:
    found = kube.store.objects.get((group, plural, namespace if plural != "nodes" else None, name))
    assert found is not None, f"{plural}/{name} does not exist"
    return found


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def until(kube: FakeKube, check: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    """Wait for a condition on the fake's store (read under its lock: never call its API from ``check``)."""
    return kube.wait_for(lambda _: check(), timeout_s=timeout_s, what=what)


def until_answered(check: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    """Wait for a condition read through the fake's API. Not under the store's lock, which the server's
    handlers take: a call from ``until`` waits forever on its own lock."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise TimeoutError(f"fake Kubernetes: {what} not reached within {timeout_s:g} s")


def events(kube: FakeKube, name: str, reason: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.objects("events")
        if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)
    ]


def container_status(obj: dict[str, Any], name: str = "main") -> dict[str, Any]:
    """The container's status, or {} while the kubelet has reported none."""
    return next((c for c in (obj.get("status") or {}).get("containerStatuses") or [] if c["name"] == name), {})


def install_lws(kube: FakeKube, api: k8s.ApiClient) -> None:
    """The whole vendored LWS release, applied as bring-up applies it, and its manager up: a pod Running
    and Ready, the cert Secret filled by its rotator (needs an untainted node for the manager)."""
    from capserve.core.cluster.addons import AddonOptions, lws_controller

    for manifest in lws_controller(AddonOptions(campaign_id="t")):
        tasks_kube.apply(api, manifest)
    until(kube, kube.cluster.lws_manager.ready, what="the LWS manager up with its certificate")
