"""Why an add-on never became ready, read from its pods as the API returns them (plain dicts)."""

from __future__ import annotations

from capserve.core.cluster.readiness import pod_problems

UNSCHEDULABLE = (
    "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/3 nodes "
    "are available: 3 Preemption is not helpful for scheduling."
)


def pod(name: str, **status: object) -> dict[str, object]:
    return {"metadata": {"name": name}, "status": status}


def test_pending_pods_carry_the_schedulers_reason() -> None:
    pending = pod("lws-controller-manager-7d9-x2", phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}])
    assert pod_problems([pending]) == [f"pod lws-controller-manager-7d9-x2 Unschedulable: {UNSCHEDULABLE}"]


def test_stuck_containers_name_the_reason() -> None:
    pulling = pod("a", containerStatuses=[{"name": "vllm", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"vllm/vllm-openai:nope\""}}}])
    crashing = pod("b", initContainerStatuses=[{"name": "prepare-node", "state": {"waiting": {
        "reason": "CrashLoopBackOff"}}}])
    oom = pod("c", containerStatuses=[{"name": "vllm", "state": {"running": {}},
                                       "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}])
    healthy = pod("d", conditions=[{"type": "PodScheduled", "status": "True"}],
                  containerStatuses=[{"name": "x", "state": {"running": {}}}])
    assert pod_problems([oom, healthy, crashing, pulling]) == [
        'pod a container vllm ImagePullBackOff: Back-off pulling image "vllm/vllm-openai:nope"',
        "pod b container prepare-node CrashLoopBackOff",
        "pod c container vllm OOMKilled",
    ]
    assert len(pod_problems([pulling] * 9, limit=3)) == 3
