"""The network proof's pod and how its outcome is read (capserve.core.cluster.netcheck)."""

from __future__ import annotations

from capserve.core.cluster import netcheck


def test_the_pod_is_pinned_to_its_node_and_tolerates_the_gpu_taint() -> None:
    pod = netcheck.netcheck_pod("ip-10-64-0-11.ec2.internal", "us-east-2", "k3-demo")
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "ip-10-64-0-11.ec2.internal"}
    toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert toleration in spec["tolerations"]
    assert spec["restartPolicy"] == "Never" and len(pod["metadata"]["name"]) <= 63
    script = spec["containers"][0]["command"][2]
    assert "kubernetes.default -k" in script and "s3.us-east-2.amazonaws.com" in script


def test_a_pull_with_no_connection_fails_at_once_and_a_throttled_one_waits() -> None:
    def pulling(message: str) -> dict[str, object]:
        waiting = {"reason": "ErrImagePull", "message": message}
        return {"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": waiting}}]}}

    timed_out = pulling('failed to do request: Head "https://public.ecr.aws/v2/x/manifests/1": dial tcp 1.2.3.4:443: '
                        "i/o timeout")
    assert netcheck.pod_outcome(timed_out)[0] == "failed"
    assert netcheck.pod_outcome(pulling("unexpected status 429 Too Many Requests"))[0] == "pending"


def test_failures_are_read_from_the_log_in_order() -> None:
    log = ("capserve-netcheck ok dns kubernetes.default\n"
           "capserve-netcheck FAIL reach kubernetes.default: curl: (28) Connection timed out after 10001 milliseconds\n"
           "capserve-netcheck FAIL dns s3.us-east-2.amazonaws.com: did not resolve\n")
    assert netcheck.failures(log) == [
        "reach kubernetes.default: curl: (28) Connection timed out after 10001 milliseconds",
        "dns s3.us-east-2.amazonaws.com: did not resolve",
    ]
    assert netcheck.passed_steps(log) == ["dns kubernetes.default"]
