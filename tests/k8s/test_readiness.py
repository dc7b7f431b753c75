"""The GPU-readiness predicate and the workload-state rules, on plain dicts shaped like API objects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.efa import efa_needs
from capserve.core.cluster.expectations import cluster_expectations
from capserve.core.cluster.readiness import (
    NodeExpectation,
    NodeProblem,
    WorkloadState,
    assess_nodes,
    device_count,
    workload_state,
)
from capserve.core.cluster.result import NodeJoin
from capserve.core.lease import Lease

EXPECT = NodeExpectation(count=2, gpus_per_node=8, efa_per_node=16, node_labels={"pool": "gpu"})


def node(
    name: str,
    *,
    ready: str = "True",
    gpus: str | None = "8",
    efa: str | None = "16",
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    hugepages: str | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": "191"}
    if hugepages is not None:
        allocatable["hugepages-2Mi"] = hugepages
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    if efa is not None:
        allocatable["vpc.amazonaws.com/efa"] = efa
    return {
        "metadata": {"name": name, "labels": {"pool": "gpu", **(labels or {})}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [
                {"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady"}
            ],
        },
    }


def test_all_ready_counts_gpus_of_ready_nodes() -> None:
    readiness = assess_nodes([node("a"), node("b")], EXPECT)
    assert readiness.ready and readiness.ready_nodes == 2 and readiness.gpus_allocatable == 16


@pytest.mark.parametrize(
    ("broken", "problem", "detail"),
    [
        (node("b", ready="False"), NodeProblem.NOT_READY, "KubeletNotReady"),
        (node("b", unschedulable=True), NodeProblem.CORDONED, "spec.unschedulable=true"),
        (node("b", gpus="0"), NodeProblem.GPUS_NOT_ADVERTISED, "nvidia.com/gpu 0 of 8"),
        (node("b", gpus=None), NodeProblem.GPUS_NOT_ADVERTISED, "nvidia.com/gpu 0 of 8"),
        (node("b", efa="8"), NodeProblem.EFA_MISSING, "vpc.amazonaws.com/efa 8 of 16"),
        (
            node("b", labels={"sagemaker.amazonaws.com/node-health-status": "UnschedulablePendingReplacement"}),
            NodeProblem.HEALTH_CHECK_FAILED,
            "UnschedulablePendingReplacement",
        ),
    ],
)
def test_each_cause_is_named_per_node(broken: dict[str, Any], problem: NodeProblem, detail: str) -> None:
    readiness = assess_nodes([node("a"), broken], EXPECT)
    assert not readiness.ready
    (bad,) = readiness.problems()
    assert bad.name == "b" and bad.problems == (problem,)
    assert f"b: {problem.value}" in readiness.describe() and detail in readiness.describe()


def test_missing_nodes_are_not_joined_and_other_pools_ignored() -> None:
    other_pool = node("system", gpus=None, efa=None, labels={"pool": "system"})
    readiness = assess_nodes([node("a"), other_pool], EXPECT)
    assert [n.name for n in readiness.nodes] == ["a", "<not joined #1>"]
    assert readiness.problems()[0].problems == (NodeProblem.NOT_JOINED,)
    assert "1 of 2 GPU nodes ready" in readiness.describe()


def test_several_problems_on_one_node_all_reported() -> None:
    readiness = assess_nodes(
        [node("a", ready="Unknown", gpus="0", unschedulable=True)], NodeExpectation(count=1, gpus_per_node=8)
    )
    assert readiness.nodes[0].problems == (NodeProblem.NOT_READY, NodeProblem.CORDONED, NodeProblem.GPUS_NOT_ADVERTISED)


def test_hyperpod_health_label_required_when_asked() -> None:
    expectation = NodeExpectation(count=1, gpus_per_node=8, require_health_label=True)
    pending = assess_nodes([node("a")], expectation)
    assert pending.nodes[0].problems == (NodeProblem.HEALTH_CHECK_PENDING,)
    healthy = assess_nodes(
        [node("a", labels={"sagemaker.amazonaws.com/node-health-status": "Schedulable"})], expectation
    )
    assert healthy.ready
    failed_deep = node(
        "a",
        labels={
            "sagemaker.amazonaws.com/node-health-status": "Schedulable",
            "sagemaker.amazonaws.com/deep-health-check-status": "Failed",
        },
    )
    assert assess_nodes([failed_deep], expectation).nodes[0].problems == (NodeProblem.HEALTH_CHECK_FAILED,)


def test_no_ready_condition_is_not_ready() -> None:
    bare = {"metadata": {"name": "a"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    report = assess_nodes([bare], NodeExpectation(count=1, gpus_per_node=8)).nodes[0]
    assert report.problems == (NodeProblem.NOT_READY,) and report.details == ("no Ready condition",)


@pytest.mark.parametrize(("quantity", "count"), [("8", 8), (8, 8), ("0", 0), (None, 0), ("1k", 0), (True, 0), (-1, 0)])
def test_device_count(quantity: object, count: int) -> None:
    assert device_count(quantity) == count


def test_label_selector_matches_node_labels() -> None:
    assert NodeExpectation(count=1, gpus_per_node=8, node_labels={"b": "2", "a": "1"}).label_selector() == "a=1,b=2"


def _deployment(
    generation: int, observed: int | None, available: int, conditions: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "availableReplicas": available,
        "updatedReplicas": available,
        "conditions": conditions or [],
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {"kind": "Deployment", "metadata": {"generation": generation}, "spec": {"replicas": 2}, "status": status}


def test_workload_state_rules() -> None:
    assert workload_state(_deployment(2, 2, 2))[0] is WorkloadState.READY
    assert workload_state(_deployment(2, 1, 2)) == (WorkloadState.PROGRESSING, "generation not yet observed")
    assert workload_state(_deployment(1, 1, 1))[0] is WorkloadState.PROGRESSING
    deadline = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    assert workload_state(_deployment(1, 1, 0, deadline)) == (WorkloadState.FAILED, "ProgressDeadlineExceeded")
    daemonset = {
        "kind": "DaemonSet",
        "metadata": {"generation": 1},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "numberReady": 1, "updatedNumberScheduled": 2},
    }
    assert workload_state(daemonset) == (WorkloadState.PROGRESSING, "1/2 ready")
    failed_job = {
        "kind": "Job",
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
    }
    assert workload_state(failed_job) == (WorkloadState.FAILED, "BackoffLimitExceeded")
    assert WorkloadState.FAILED.is_terminal and not WorkloadState.PROGRESSING.is_terminal
    assert workload_state({"kind": "ConfigMap"})[0] is WorkloadState.READY


def _expectation(nodes_per_replica: int) -> NodeExpectation:
    start = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
    lease = Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
                  reservation_id="cr-0123456789abcdef0", start=start, end=start + timedelta(days=1),
                  instance_type="p6-b300.48xlarge", instance_count=2, upfront_fee=5000.0)
    efa = efa_needs(get_instance_type(lease.instance_type), nodes_per_replica)
    return cluster_expectations("k3-demo", lease, kind="eks", system_pool=True, efa=efa).nodes


def test_one_node_layouts_are_ready_without_efa_devices_or_huge_pages() -> None:
    # Two replicas of TP8 on one p6-b300 each: nothing crosses a node, so nothing waits for EFA.
    expectation = _expectation(nodes_per_replica=1)
    assert (expectation.efa_per_node, expectation.hugepages_2mi_mib) == (0, 0)
    labels = expectation.node_labels
    assert assess_nodes([node("a", efa=None, labels=labels), node("b", efa="0", labels=labels)], expectation).ready


def test_multi_node_layouts_need_every_efa_device_and_the_huge_pages() -> None:
    expectation = _expectation(nodes_per_replica=2)
    assert (expectation.efa_per_node, expectation.hugepages_2mi_mib) == (16, 5120)
    labels = expectation.node_labels
    ready = node("a", labels=labels, hugepages="10256Mi")  # 5128 pages of 2 MiB
    no_pages = node("b", labels=labels, hugepages="0")
    readiness = assess_nodes([ready, no_pages, node("c", efa="0", labels=labels, hugepages="10256Mi")], expectation)
    assert [n.problems for n in readiness.nodes] == [(), (NodeProblem.HUGEPAGES_MISSING,), (NodeProblem.EFA_MISSING,)]
    assert "b: huge pages missing (hugepages-2Mi 0Mi of 5120Mi)" in readiness.describe()


def joined(name: str, registered: str, ready_since: str, *, ready: str = "True") -> dict[str, Any]:
    obj = node(name, ready=ready)
    obj["metadata"]["creationTimestamp"] = registered
    obj["status"]["conditions"][0]["lastTransitionTime"] = ready_since
    return obj


def test_the_join_is_the_last_nodes_registration_and_ready_transition_against_the_model() -> None:
    began = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
    readiness = assess_nodes(
        [joined("a", "2026-12-05T11:52:10Z", "2026-12-05T11:53:00Z"),
         joined("b", "2026-12-05T11:58:40Z", "2026-12-05T11:59:41Z")],
        EXPECT,
    )
    join = NodeJoin.of(readiness, began_at=began, usable_at=began + timedelta(minutes=31), predicted_s=1800)
    assert (join.registered_at, join.ready_at) == (
        datetime(2026, 12, 5, 11, 58, 40, tzinfo=UTC), datetime(2026, 12, 5, 11, 59, 41, tzinfo=UTC)
    )
    assert join.measured_s == 31 * 60
    assert join.markdown() == (
        "GPU nodes: bring-up began 11:30:00; the last node registered 11:58:40 and turned Ready 11:59:41; every GPU "
        "allocatable at 12:01:00: 31.0 min (the time model: 30.0 min for EC2 launch and node join)."
    )


def test_a_node_not_ready_has_no_ready_time_and_does_not_count_in_the_join() -> None:
    began = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
    readiness = assess_nodes(
        [joined("a", "2026-12-05T11:52:10Z", "2026-12-05T11:53:00Z"),
         joined("b", "2026-12-05T11:58:40Z", "2026-12-05T11:59:41Z", ready="False")],
        EXPECT,
    )
    assert [n.ready_since for n in readiness.nodes] == [datetime(2026, 12, 5, 11, 53, tzinfo=UTC), None]
    join = NodeJoin.of(readiness, began_at=began, usable_at=began, predicted_s=1800)
    assert join.registered_at == datetime(2026, 12, 5, 11, 52, 10, tzinfo=UTC)
