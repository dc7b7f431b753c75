"""The rollout's diagnoses from pod and event dicts (pure), and what the report says about a rollout."""

from __future__ import annotations

from typing import Any

from capserve.core.rollout.diagnosis import (
    Trouble,
    all_ready,
    diagnose,
    diagnose_pod,
    failed_containers,
    timeout_diagnosis,
    transport_diagnosis,
    transport_settled,
)
from capserve.core.rollout.result import server_from_log
from capserve.core.rollout.settings import RolloutWaitSettings

SETTINGS = RolloutWaitSettings(unschedulable_grace_s=60, crash_restarts=2)


def pod(name: str = "vllm-blue-0", *, conditions: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": conditions or [], **status}}


def container(name: str = "vllm", restarts: int = 0, **states: Any) -> dict[str, Any]:
    return {"name": name, "restartCount": restarts, **states}


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}.",
}


def test_unschedulable_is_named_with_the_schedulers_reason_and_fatal_only_after_the_grace() -> None:
    stuck = pod(conditions=[UNSCHEDULABLE])
    early = diagnose_pod(stuck, [], pending_for_s=5, settings=SETTINGS)
    late = diagnose_pod(stuck, [], pending_for_s=61, settings=SETTINGS)
    assert early is not None and early.trouble is Trouble.UNSCHEDULABLE and not early.fatal
    assert late is not None and late.fatal and "untolerated taint {nvidia.com/gpu: true}" in late.describe()


def test_missing_gpus_or_efa_devices_are_named_as_not_allocatable() -> None:
    no_gpus = {**UNSCHEDULABLE, "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}
    found = diagnose_pod(pod(conditions=[no_gpus]), [], pending_for_s=61, settings=SETTINGS)
    assert found is not None and found.trouble is Trouble.DEVICES_NOT_ALLOCATABLE
    assert "device plugin" in found.describe()


def test_image_pull_is_fatal_at_the_back_off_not_at_the_first_error() -> None:
    def pulling(reason: str) -> dict[str, Any]:
        waiting = {"waiting": {"reason": reason, "message": "pull access denied"}}
        return pod(containerStatuses=[container(state=waiting)])

    first = diagnose_pod(pulling("ErrImagePull"), [], pending_for_s=0, settings=SETTINGS)
    backoff = diagnose_pod(pulling("ImagePullBackOff"), [], pending_for_s=0, settings=SETTINGS)
    assert first is not None and first.trouble is Trouble.IMAGE_PULL and not first.fatal
    assert backoff is not None and backoff.fatal and "serving.image" in backoff.describe()


def test_oom_killed_is_fatal_at_once_and_a_crash_loop_after_its_restarts() -> None:
    oom = pod(
        containerStatuses=[container(restarts=1, lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}})]
    )
    found = diagnose_pod(oom, [], pending_for_s=0, settings=SETTINGS)
    assert found is not None and found.trouble is Trouble.OOM_KILLED and found.fatal and "137" in found.message

    def looping(restarts: int) -> dict[str, Any]:
        states = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}
        return pod(initContainerStatuses=[container("prepare-node", restarts, **states)])

    once = diagnose_pod(looping(1), [], pending_for_s=0, settings=SETTINGS)
    twice = diagnose_pod(looping(2), [], pending_for_s=0, settings=SETTINGS)
    assert once is not None and not once.fatal and once.container == "prepare-node"
    assert twice is not None and twice.fatal and twice.needs_log
    with_log = twice.model_copy(update={"log_tail": ("weights are layout node 1's",)})
    assert "last log lines: weights are layout node 1's" in with_log.describe()


def test_a_crash_loop_is_told_by_its_restarts_even_while_the_container_runs_again() -> None:
    # Between back-offs the kubelet runs the container once more: a look at that moment sees no CrashLoopBackOff.
    def between_back_offs(restarts: int) -> dict[str, Any]:
        states = {"state": {"running": {"startedAt": "t"}}, "lastState": {"terminated": {"exitCode": 1}}}
        return pod(initContainerStatuses=[container("prepare-node", restarts, **states)])

    assert diagnose_pod(between_back_offs(1), [], pending_for_s=0, settings=SETTINGS) is None
    found = diagnose_pod(between_back_offs(2), [], pending_for_s=0, settings=SETTINGS)
    assert found is not None and (found.trouble, found.fatal) == (Trouble.CRASH_LOOP, True)
    assert found.message == "running again after 2 restart(s), last exit code 1"


def test_a_pod_its_leaderworkerset_recreated_after_failures_counts_them_as_restarts() -> None:
    # LWS deletes a group whose container restarted; the new pod of that name starts again at restartCount 0.
    failed_now = pod(containerStatuses=[container(state={"terminated": {"exitCode": 2}})])
    assert failed_containers(failed_now) == ["vllm"]
    assert failed_containers(pod(containerStatuses=[container(state={"running": {}})])) == []
    assert diagnose_pod(failed_now, [], pending_for_s=0, settings=SETTINGS) is None  # one failure: may be passing
    found = diagnose_pod(failed_now, [], pending_for_s=0, settings=SETTINGS, earlier_failures={"vllm": 2})
    assert found is not None and (found.trouble, found.fatal) == (Trouble.CRASH_LOOP, True)
    assert found.message == "failed again after 2 restart(s), last exit code 2 (2 of them by its LeaderWorkerSet " \
                            "recreating the pod)"


def test_a_startup_probe_kill_names_the_budget_and_the_last_probe_failure() -> None:
    events = [
        {
            "involvedObject": {"name": "vllm-blue-0"},
            "reason": "Unhealthy",
            "message": "Startup probe failed: connection refused",
        },
        {
            "involvedObject": {"name": "vllm-blue-0"},
            "reason": "Killing",
            "message": "Container vllm failed startup probe, will be restarted",
        },
    ]
    found = diagnose_pod(pod(), events, pending_for_s=0, settings=SETTINGS)
    assert found is not None and found.trouble is Trouble.STARTUP_PROBE and found.fatal
    assert "connection refused" in found.message and "startup_budget_minutes" in found.describe()
    # Another pod's kill is not this one's.
    assert diagnose_pod(pod("other"), events, pending_for_s=0, settings=SETTINGS) is None


def test_fatal_diagnoses_come_first_and_ready_means_every_expected_pod() -> None:
    ready = pod("a", conditions=[{"type": "Ready", "status": "True"}])
    stuck = pod("b", conditions=[UNSCHEDULABLE])
    assert all_ready([ready], 1) and not all_ready([ready], 2) and not all_ready([ready, stuck], 2)
    oom = pod("c", containerStatuses=[container(state={"terminated": {"reason": "OOMKilled", "exitCode": 137}})])
    found = diagnose([stuck, oom], [], pending_for_s={"b": 1.0}, settings=SETTINGS)
    assert [d.trouble for d in found] == [Trouble.OOM_KILLED, Trouble.UNSCHEDULABLE]
    timeout = timeout_diagnosis([ready, stuck], 3, 100)
    assert timeout.fatal and "2/3 pod(s) after 100 s" in timeout.message and "b Pending (not Ready)" in timeout.message


def test_the_server_is_read_from_the_leaders_log() -> None:
    assert server_from_log("INFO vLLM API server version 0.32.0") == "vLLM 0.32.0"
    simulated = "INFO [utils.py] vLLM API server version 0.32.0 (capserve sandbox stand-in)"
    assert "simulated vLLM 0.32.0" in server_from_log(simulated)
    assert server_from_log("nothing").startswith("unknown")
    # A real vLLM behind the sandbox's argument checker: the real server's own line wins.
    checked = "INFO [utils.py] vLLM API server version 0.32.0 (capserve sandbox stand-in)\n"
    assert server_from_log(checked + "INFO [api_utils.py:330] vLLM server version 0.32.0, serving model smol") == (
        "vLLM 0.32.0"
    )
    logo = " \x1b[33m▄▄\x1b[0m \x1b[97m█     █     █ ▀▄▀ █\x1b[0m  version \x1b[97m0.32.1\x1b[0m\n"
    assert server_from_log(checked + logo) == "vLLM 0.32.1"


# NCCL's own lines with NCCL_DEBUG=INFO (src/debug.cc format; src/init.cc, aws-ofi-nccl, net_socket.cc).
EFA_LOG = """INFO [core_client.py] All 1 remote engine node(s) connected
vllm-blue-0:41:41 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)
vllm-blue-0:41:41 [0] NCCL INFO Using network Libfabric
"""
SOCKET_LOG = """vllm-blue-0:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.7<0>
vllm-blue-0:41:41 [0] NCCL INFO Using network Socket
"""


def test_nccl_over_the_efa_plugin_is_the_transport_a_multi_node_server_needs() -> None:
    assert transport_diagnosis(EFA_LOG, pod="vllm-blue-0") is None
    assert transport_diagnosis(EFA_LOG.replace("Libfabric", "AWS Libfabric"), pod="vllm-blue-0") is None


def test_nccl_on_sockets_fails_the_rollout_with_what_to_fix() -> None:
    found = transport_diagnosis(SOCKET_LOG, pod="vllm-blue-0")
    assert found is not None and found.trouble is Trouble.TRANSPORT and found.fatal
    assert "NCCL uses network Socket, not EFA" in found.describe() and "aws-ofi-nccl" in found.describe()


def test_the_transport_is_judged_once_nccl_names_its_network_not_before() -> None:
    connected = "INFO [core_client.py] All 1 remote engine node(s) connected\n"
    assert not transport_settled(connected)
    assert not transport_settled(connected + SOCKET_LOG.splitlines()[0])  # the socket transport's own line only
    assert transport_settled(connected + SOCKET_LOG) and transport_settled(EFA_LOG)


def test_another_libfabric_provider_or_no_nccl_line_is_not_efa_either() -> None:
    tcp = EFA_LOG.replace("Provider is efa", "Provider is tcp")
    found = transport_diagnosis(tcp, pod="vllm-blue-0")
    assert found is not None and "selected libfabric provider tcp, not efa" in found.message
    silent = transport_diagnosis("INFO [core_client.py] All 1 remote engine node(s) connected\n", pod="vllm-blue-0")
    assert silent is not None and "no NCCL 'Using network' line" in silent.message
