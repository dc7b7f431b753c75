"""The fake API server through the official client: the API behaviour our task code relies on.

Each test goes through a client built by ``capserve.tasks.kube.api_client`` (so through our auth
and configuration path); the typed APIs stand in for what roll-out and teardown code will call.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from capserve_sandbox.kube import FakeKube
from kubernetes import client as k8s
from kubernetes import watch

from capserve.core.errors import PermanentError
from capserve.tasks import kube as tasks_kube


def configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "data": data,
    }


def test_discovery_and_version(api: k8s.ApiClient) -> None:
    assert k8s.VersionApi(api).get_code().minor == "34"
    groups = {g.name for g in k8s.ApisApi(api).get_api_versions().groups}
    assert {"apps", "batch", "apiextensions.k8s.io", "storage.k8s.io"} <= groups
    dyn = tasks_kube.dynamic_client(api)
    assert dyn.resources.get(api_version="apps/v1", kind="DaemonSet").namespaced


def test_crud_conflicts_and_missing(api: k8s.ApiClient) -> None:
    v1 = k8s.CoreV1Api(api)
    v1.create_namespaced_config_map("default", configmap("a", {"k": "1"}))
    with pytest.raises(k8s.ApiException) as duplicate:
        v1.create_namespaced_config_map("default", configmap("a", {"k": "1"}))
    assert duplicate.value.status == 409
    with pytest.raises(k8s.ApiException) as missing:
        v1.read_namespaced_config_map("nope", "default")
    assert missing.value.status == 404
    with pytest.raises(k8s.ApiException) as no_namespace:
        v1.create_namespaced_config_map("ghost", configmap("a", {}))
    assert no_namespace.value.status == 404
    current = v1.read_namespaced_config_map("a", "default")
    stale = configmap("a", {"k": "2"})
    stale["metadata"]["resourceVersion"] = "1"
    with pytest.raises(k8s.ApiException) as conflict:
        v1.replace_namespaced_config_map("a", "default", stale)
    assert conflict.value.status == 409
    fresh = configmap("a", {"k": "3"})
    fresh["metadata"]["resourceVersion"] = current.metadata.resource_version
    assert v1.replace_namespaced_config_map("a", "default", fresh).data == {"k": "3"}


def test_label_and_field_selectors(api: k8s.ApiClient) -> None:
    v1 = k8s.CoreV1Api(api)
    for name, color in (("blue", "blue"), ("green", "green"), ("plain", None)):
        v1.create_namespaced_config_map("default", configmap(name, {}, {"color": color} if color else {}))

    def names(**selectors: str) -> list[str]:
        return sorted(i.metadata.name for i in v1.list_namespaced_config_map("default", **selectors).items)

    assert names(label_selector="color=blue") == ["blue"]
    assert names(label_selector="color!=blue") == ["green", "plain"]
    assert names(label_selector="color in (blue,green)") == ["blue", "green"]
    assert names(label_selector="!color") == ["plain"]
    assert names(field_selector="metadata.name=green") == ["green"]


def test_patches_and_status_subresource(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    labels = {"app": "web"}
    body = {
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "a", "image": "x:1", "args": ["--keep"]}, {"name": "b", "image": "y:1"}]
                },
            },
        },
    }
    apps.create_namespaced_deployment("default", body)
    # Strategic merge: containers merge by name, the args of "a" survive.
    patched = apps.patch_namespaced_deployment(
        "web", "default", {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:2"}]}}}}
    )
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert containers["a"].image == "x:2" and containers["a"].args == ["--keep"] and "b" in containers
    assert patched.metadata.generation == 2
    # Writes to the main resource leave status alone; writes to /status leave spec alone.
    status = apps.patch_namespaced_deployment_status(
        "web", "default", {"status": {"replicas": 7, "observedGeneration": 2}}
    )
    assert status.status.replicas == 7 and status.metadata.generation == 2
    apps.patch_namespaced_deployment("web", "default", {"status": {"replicas": 99}, "spec": {"replicas": 3}})
    after = apps.read_namespaced_deployment("web", "default")
    # 7 (ours) or what the fake Deployment controller computed from the pods meanwhile; never the 99
    # sent to the main resource.
    assert after.status.replicas != 99 and after.spec.replicas == 3


def test_server_side_apply_ownership(kube: FakeKube, api: k8s.ApiClient) -> None:
    dyn = tasks_kube.dynamic_client(api)
    maps = dyn.resources.get(api_version="v1", kind="ConfigMap")
    dyn.server_side_apply(maps, body=configmap("cfg", {"a": "1", "b": "2"}), field_manager="capserve")
    with pytest.raises(k8s.ApiException) as conflict:
        dyn.server_side_apply(maps, body=configmap("cfg", {"a": "other"}), field_manager="someone")
    assert (
        conflict.value.status == 409
        and "someone" not in str(conflict.value.body)
        and "capserve" in str(conflict.value.body)
    )
    forced = dyn.server_side_apply(
        maps, body=configmap("cfg", {"a": "other"}), field_manager="someone", force_conflicts=True
    )
    assert forced.data.a == "other"
    # capserve no longer applies "b": it is removed; "a" now belongs to "someone" and stays.
    again = dyn.server_side_apply(maps, body=configmap("cfg", {}), field_manager="capserve").to_dict()
    assert again["data"] == {"a": "other"}
    entries = {e["manager"]: e for e in again["metadata"]["managedFields"]}
    assert entries["someone"]["fieldsV1"] == {"f:data": {"f:a": {}}}


def test_watch_resume_bookmarks_and_expiry(kube: FakeKube, api: k8s.ApiClient) -> None:
    v1 = k8s.CoreV1Api(api)
    v1.create_namespaced_config_map("default", configmap("one", {}))
    start = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.create_namespaced_config_map("default", configmap("two", {}))
    v1.delete_namespaced_config_map("one", "default")
    events = [
        (e["type"], e["raw_object"]["metadata"].get("name"))
        for e in watch.Watch().stream(
            v1.list_namespaced_config_map,
            "default",
            resource_version=start,
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    ]
    assert events[:2] == [("ADDED", "two"), ("DELETED", "one")]
    assert events[-1][0] == "BOOKMARK"
    kube.compact()
    with pytest.raises(k8s.ApiException) as gone:
        list(watch.Watch().stream(v1.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=1))
    assert gone.value.status == 410


def test_watch_sees_changes_made_while_it_waits(kube: FakeKube, api: k8s.ApiClient) -> None:
    v1 = k8s.CoreV1Api(api)
    later = threading.Timer(0.2, lambda: kube.provision_nodes("gpu", 1, device_plugins="builtin"))
    later.start()
    seen = []
    stream = watch.Watch()
    for event in stream.stream(v1.list_node, timeout_seconds=5):
        seen.append(event["object"].status.allocatable["nvidia.com/gpu"])
        stream.stop()
    later.join()
    assert seen == ["8"]


def test_delete_propagation_and_namespace_cascade(api: k8s.ApiClient) -> None:
    v1 = k8s.CoreV1Api(api)
    v1.create_namespace({"metadata": {"name": "serving"}})
    owner = v1.create_namespaced_config_map("serving", configmap("owner", {}))
    for name in ("kept", "dropped"):
        dependent = configmap(name, {})
        dependent["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
        ]
        v1.create_namespaced_config_map("serving", dependent)
    v1.delete_namespaced_config_map("owner", "serving", propagation_policy="Orphan")
    assert (
        v1.read_namespaced_config_map("kept", "serving").metadata.owner_references is None
        or v1.read_namespaced_config_map("kept", "serving").metadata.owner_references == []
    )
    v1.delete_namespace("serving")
    assert v1.list_namespaced_config_map("serving").items == []


def test_crd_serves_its_kind_validates_and_defaults(api: k8s.ApiClient) -> None:
    from capserve.core.cluster.addons import lws_crd

    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "default"},
        "spec": {
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest"}]}},
            }
        },
    }
    custom = k8s.CustomObjectsApi(api)
    with pytest.raises(k8s.ApiException) as before:
        custom.list_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", "default", "leaderworkersets")
    assert before.value.status == 404
    tasks_kube.apply(api, lws_crd())
    created = tasks_kube.apply(api, lws)
    assert created["spec"]["startupPolicy"] == "LeaderCreated"  # schema default
    bad = {**lws, "spec": {"leaderWorkerTemplate": {"restartPolicy": "Sometimes", "workerTemplate": {}}}}
    with pytest.raises(PermanentError, match="422"):
        tasks_kube.apply(api, bad)
