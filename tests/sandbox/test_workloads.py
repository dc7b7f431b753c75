"""Controllers create pods the way the real ones do, and workload status is read back from those pods."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
from capserve_sandbox.kube import FakeKube, Fault, FaultKind
from kubernetes import client as k8s

from capserve.core.cluster.addons import lws_crd
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import GPU_TAINT, condition, container_status, events, get, install_lws, until

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]"


def template(app: str, image: str = "registry.k8s.io/pause:3.10", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "main", "image": image}], **spec}}


def deployment(name: str, replicas: int = 2, image: str = "registry.k8s.io/pause:3.10") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template(name, image)},
    }


def owned_pods(kube: FakeKube, prefix: str) -> list[dict[str, Any]]:
    return sorted(
        (p for p in kube.objects("pods") if p["metadata"]["name"].startswith(prefix)),
        key=lambda p: p["metadata"]["name"],
    )


def test_deployment_makes_a_replicaset_and_pods_and_reads_status_from_them(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    tasks_kube.apply(api, deployment("web"))
    available = until(kube, lambda: get(kube, "deployments", "web", "apps")["status"].get("availableReplicas") == 2)
    assert available
    [rs] = kube.objects("replicasets", "apps")
    assert re.fullmatch(rf"web-{SUFFIX}{{6,10}}", rs["metadata"]["name"])
    pods = owned_pods(kube, "web-")
    assert len(pods) == 2 and all(
        re.fullmatch(rf"{rs['metadata']['name']}-{SUFFIX}{{5}}", p["metadata"]["name"]) for p in pods
    )
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"] for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {n["metadata"]["name"] for n in kube.objects("nodes")}
    status = get(kube, "deployments", "web", "apps")["status"]
    assert condition({"status": status}, "Available")["reason"] == "MinimumReplicasAvailable"
    assert condition({"status": status}, "Progressing")["reason"] == "NewReplicaSetAvailable"

    # A new template rolls out through a second ReplicaSet; the old one is scaled to zero.
    tasks_kube.apply(api, deployment("web", image="registry.k8s.io/pause:3.11"))
    until(
        kube,
        lambda: (
            len(kube.objects("replicasets", "apps")) == 2
            and all(
                (rs["spec"]["replicas"] == 0)
                == (rs["spec"]["template"]["spec"]["containers"][0]["image"].endswith("3.10"))
                for rs in kube.objects("replicasets", "apps")
            )
            and get(kube, "deployments", "web", "apps")["status"].get("updatedReplicas") == 2
            and get(kube, "deployments", "web", "apps")["status"].get("replicas") == 2
        ),
    )
    images = {p["spec"]["containers"][0]["image"] for p in owned_pods(kube, "web-")}
    assert images == {"registry.k8s.io/pause:3.11"}


def test_a_deployment_that_never_becomes_available_exceeds_its_progress_deadline(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="broken-*"))
    tasks_kube.apply(api, deployment("broken", replicas=1))  # progressDeadlineSeconds 600 = 1 s at 600x

    def progressing() -> dict[str, Any] | None:
        return condition(get(kube, "deployments", "broken", "apps"), "Progressing")

    until(kube, lambda: (progressing() or {}).get("reason") == "ProgressDeadlineExceeded")
    assert progressing()["status"] == "False"
    assert container_status(owned_pods(kube, "broken-")[0])["restartCount"] >= 1


def test_daemonset_runs_one_pod_per_node_it_admits(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("gpu", 1, taints=[GPU_TAINT])
    (system,) = kube.provision_nodes("system", 1, instance_type="m7i.large")
    tasks_kube.apply(
        api,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")},
        },
    )
    until(kube, lambda: get(kube, "daemonsets", "agent", "apps")["status"].get("numberReady") == 1)
    [only] = owned_pods(kube, "agent-")
    assert only["spec"]["nodeName"] == system
    terms = only["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [system]}]}]
    }
    (later,) = kube.provision_nodes("system", 1, instance_type="m7i.large")
    until(kube, lambda: get(kube, "daemonsets", "agent", "apps")["status"].get("numberReady") == 2)
    assert {p["spec"]["nodeName"] for p in owned_pods(kube, "agent-")} == {system, later}
    assert get(kube, "daemonsets", "agent", "apps")["status"]["desiredNumberScheduled"] == 2


def job(name: str, backoff_limit: int, restart: str = "Never") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "busybox:1.37"}]}},
        },
    }


def test_job_retries_failed_pods_up_to_its_backoff_limit(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    tasks_kube.apply(api, job("works", 2))
    until(kube, lambda: condition(get(kube, "jobs", "works", "batch"), "Complete"))
    assert get(kube, "jobs", "works", "batch")["status"]["succeeded"] == 1

    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="fails-*"))
    tasks_kube.apply(api, job("fails", 2))
    until(kube, lambda: condition(get(kube, "jobs", "fails", "batch"), "Failed"))
    failed = get(kube, "jobs", "fails", "batch")
    assert condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    assert failed["status"]["failed"] == 3  # backoffLimit 2: the third failure ends the Job
    pods = owned_pods(kube, "fails-")
    assert len(pods) == 3 and all(p["status"]["phase"] == "Failed" for p in pods)
    assert all(re.fullmatch(rf"fails-{SUFFIX}{{5}}", p["metadata"]["name"]) for p in pods)
    assert pods[0]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "fails"
    assert events(kube, "fails", "BackoffLimitExceeded")


def test_job_with_on_failure_counts_container_restarts(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="restarts-*"))
    tasks_kube.apply(api, job("restarts", 1, restart="OnFailure"))
    until(kube, lambda: condition(get(kube, "jobs", "restarts", "batch"), "Failed"))
    assert len(owned_pods(kube, "restarts-")) <= 1  # one pod, restarted in place, then removed


def test_statefulset_makes_ordinal_pods_in_order(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    kube.inject(Fault(FaultKind.SLOW_START, pod="db-0"))  # no effect on a placeholder: it is ready at once
    tasks_kube.apply(
        api,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": template("db"),
            },
        },
    )
    until(kube, lambda: get(kube, "statefulsets", "db", "apps")["status"].get("readyReplicas") == 3)
    pods = owned_pods(kube, "db-")
    assert [p["metadata"]["name"] for p in pods] == ["db-0", "db-1", "db-2"]
    assert [p["spec"]["hostname"] for p in pods] == ["db-0", "db-1", "db-2"]
    assert {p["spec"]["subdomain"] for p in pods} == {"db"}
    created = [e["involvedObject"] for e in kube.objects("events") if e["reason"] == "SuccessfulCreate"]
    assert created  # created one after the other (OrderedReady): each event names the set
    assert pods[0]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "0"


# ----------------------------------------------------------------------------- LeaderWorkerSet


def lws(name: str, size: int, **spec: Any) -> dict[str, Any]:
    pod_spec = {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "env": [{"name": "OWN", "value": "$(LWS_LEADER_ADDRESS)"}],
            }
        ]
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": pod_spec}}, **spec},
    }


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_leaderworkerset_builds_leader_and_worker_statefulsets(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    install_lws(kube, api)
    tasks_kube.apply(api, lws("vllm", 3))
    until(
        kube,
        lambda: (
            (get(kube, "leaderworkersets", "vllm", "leaderworkerset.x-k8s.io").get("status") or {}).get("readyReplicas")
            == 1
        ),
    )
    statefulsets = {s["metadata"]["name"]: s for s in kube.objects("statefulsets", "apps")}
    assert set(statefulsets) == {"vllm", "vllm-0"}
    leader = get(kube, "pods", "vllm-0")
    workers = [get(kube, "pods", "vllm-0-1"), get(kube, "pods", "vllm-0-2")]
    assert statefulsets["vllm-0"]["metadata"]["ownerReferences"][0]["uid"] == leader["metadata"]["uid"]
    labels = leader["metadata"]["labels"]
    assert labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
    assert leader["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "3"
    assert env_of(leader)["LWS_LEADER_ADDRESS"] == "vllm-0.vllm.default"
    assert [env_of(w)["LWS_WORKER_INDEX"] for w in workers] == ["1", "2"]
    assert {env_of(w)["LWS_GROUP_SIZE"] for w in [leader, *workers]} == {"3"}
    assert list(env_of(leader))[:3] == ["LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"]
    key = labels["leaderworkerset.sigs.k8s.io/group-key"]
    assert {w["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"] for w in workers} == {key}
    service = get(kube, "services", "vllm")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert {w["spec"]["subdomain"] for w in [leader, *workers]} == {"vllm"}
    status = get(kube, "leaderworkersets", "vllm", "leaderworkerset.x-k8s.io")["status"]
    assert condition({"status": status}, "Available")["status"] == "True"


def test_a_restart_in_a_group_recreates_the_whole_group(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    install_lws(kube, api)
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="group-0-1", seconds=1, times=1))  # one crash of the worker
    tasks_kube.apply(api, lws("group", 2))
    first = until(kube, lambda: kube.store.objects.get(("", "pods", "default", "group-0")))
    first_uid = first["metadata"]["uid"]
    until(kube, lambda: events(kube, "group", "RecreateGroupOnPodRestart"), what="the group recreated")

    def ready_again() -> bool:
        leader = kube.store.objects.get(("", "pods", "default", "group-0"))
        status = get(kube, "leaderworkersets", "group", "leaderworkerset.x-k8s.io").get("status") or {}
        return bool(leader and leader["metadata"]["uid"] != first_uid and status.get("readyReplicas") == 1)

    until(kube, ready_again, what="the rebuilt group ready")
    assert container_status(get(kube, "pods", "group-0-1"))["restartCount"] == 0  # a new worker pod


def test_leader_ready_startup_policy_waits_for_the_leader(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    install_lws(kube, api)
    kube.inject(Fault(FaultKind.IMAGE_PULL, pod="waits-0"))  # the leader never starts
    tasks_kube.apply(api, lws("waits", 2, startupPolicy="LeaderReady"))
    until(kube, lambda: events(kube, "waits-0", "BackOff"))
    assert ("apps", "statefulsets", "default", "waits-0") not in kube.store.objects


# ----------------------------------------------------------------------------- what the fake writes is valid


@cache
def lws_status_schema() -> dict[str, Any]:
    crd = lws_crd()
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_objects_the_fake_writes_validate_against_the_schemas(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("gpu", 1, taints=[GPU_TAINT])
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    kube.bootstrap_eks()
    install_lws(kube, api)
    tasks_kube.apply(api, deployment("web"))
    tasks_kube.apply(api, job("once", 1))
    tasks_kube.apply(api, lws("serve", 2))
    kube.inject(Fault(FaultKind.CRASH_LOOP, pod="unready"))
    tasks_kube.apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "unready", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]},
        },
    )
    until(
        kube,
        lambda: (
            (get(kube, "leaderworkersets", "serve", "leaderworkerset.x-k8s.io").get("status") or {}).get(
                "readyReplicas"
            )
            == 1
            and condition(get(kube, "jobs", "once", "batch"), "Complete")
            and container_status(get(kube, "pods", "unready"))["restartCount"] >= 1
        ),
    )
    checked = 0
    for plural, group in (
        ("pods", ""),
        ("nodes", ""),
        ("events", ""),
        ("services", ""),
        ("deployments", "apps"),
        ("replicasets", "apps"),
        ("daemonsets", "apps"),
        ("statefulsets", "apps"),
        ("jobs", "batch"),
    ):
        for obj in kube.objects(plural, group):
            clean = {k: v for k, v in obj.items()}
            clean["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
            kubernetes_validate.validate(clean, "1.34", strict=True)
            checked += 1
    jsonschema.Draft4Validator(lws_status_schema()).validate(
        get(kube, "leaderworkersets", "serve", "leaderworkerset.x-k8s.io")
    )
    assert checked > 20
