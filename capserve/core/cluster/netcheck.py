"""The bring-up network proof: a short pod on each GPU node resolves and reaches the API server and S3.

Why: a GPU node can be Ready and still have no way to what the next stages need. Its pods resolve
names through CoreDNS on the system nodes, which the security groups may not admit (EKS user guide,
"Customize managed nodes with launch templates": with groups in a launch template EKS does not add
the cluster security group), and the weights come from S3 through the node subnet's routes (NAT
gateway or S3 gateway endpoint). Both fail late and expensively in staging; this check fails in
seconds, naming the node and the missing path, before anything heavy is scheduled.

The pod runs the AWS CLI image the staging Job pulls anyway (so the check adds no registry), pinned
to the node by hostname and tolerating the GPU taint. Its script uses ``getent hosts`` (glibc, in
the image's Amazon Linux base) and ``curl``: any HTTP answer proves the path (``-k`` on the API
server: this proves reachability, not identity; the kubelet's own TLS does the latter).

Pure: the manifest and the reading of the pod's log; ``capserve.tasks.netcheck`` runs it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from capserve.core.cluster.eks import GPU_TAINT

NETCHECK_LABEL = "capserve.io/netcheck"
NAMESPACE = "default"
MARK = "capserve-netcheck"
API_SERVER = "kubernetes.default"
CONNECT_TIMEOUT_S = 10
# The AWS CLI image the staging Job pulls by default (WeightsSettings.staging_image): Amazon Linux based.
NETCHECK_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.50"


def s3_host(region: str) -> str:
    return f"s3.{region}.amazonaws.com"


def pod_name(node: str) -> str:
    """A DNS-1123 name per node (63 characters at most, stable across runs)."""
    readable = node.split(".", 1)[0].lower().replace("_", "-")[:32].strip("-")
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{MARK}-{readable}-{digest}"


def script(region: str) -> str:
    """The check: every target resolved, then connected to; one line per step; exit 1 if any failed."""
    return f"""set -u
failed=0
check() {{
  what="$1"; host="$2"; shift 2
  if ! getent hosts "$host" > /dev/null; then
    echo "{MARK} FAIL dns $host: did not resolve ($what; pod DNS goes to CoreDNS on UDP 53)"
    failed=1
    return
  fi
  echo "{MARK} ok dns $host"
  if out=$(curl -sS -o /dev/null --connect-timeout {CONNECT_TIMEOUT_S} --max-time {CONNECT_TIMEOUT_S * 2} "$@" \\
      "https://$host/" 2>&1); then
    echo "{MARK} ok reach $host"
  else
    echo "{MARK} FAIL reach $host: $out ($what)"
    failed=1
  fi
}}
check "the Kubernetes API server" {API_SERVER} -k
check "S3, where the weights are" {s3_host(region)}
exit $failed
"""


def netcheck_pod(node: str, region: str, campaign_id: str, image: str = NETCHECK_IMAGE) -> dict[str, Any]:
    """The pod for one GPU node: pinned by hostname, tolerating the GPU taint, never restarted."""
    effects = {"NO_SCHEDULE": "NoSchedule"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node),
            "namespace": NAMESPACE,
            "labels": {NETCHECK_LABEL: campaign_id},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [
                {
                    "key": GPU_TAINT["key"],
                    "operator": "Equal",
                    "value": GPU_TAINT["value"],
                    "effect": effects[GPU_TAINT["effect"]],
                }
            ],
            "activeDeadlineSeconds": 120,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "netcheck",
                    "image": image,
                    "command": ["/bin/sh", "-c", script(region)],
                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                }
            ],
        },
    }


def failures(log_text: str) -> list[str]:
    """The failed steps a netcheck pod printed, in order ("dns <host>: ...", "reach <host>: ...")."""
    prefix = f"{MARK} FAIL "
    return [line.strip()[len(prefix):] for line in log_text.splitlines() if line.strip().startswith(prefix)]


def passed_steps(log_text: str) -> list[str]:
    prefix = f"{MARK} ok "
    return [line.strip()[len(prefix):] for line in log_text.splitlines() if line.strip().startswith(prefix)]


_NO_CONNECTION = ("dial tcp", "i/o timeout", "no such host", "connection refused", "network is unreachable")


def pod_outcome(pod: dict[str, Any]) -> tuple[str, str]:
    """("passed" | "failed" | "pending", what is known) for one netcheck pod as the API server shows it.

    An image pull that fails for want of a connection (``dial tcp``, ``i/o timeout``, ``no such host``)
    is final here: the node has no path to the registry, itself a missing path the proof names (the
    kubelet would only back off and retry). Other pull errors (a registry's 429 or 5xx) may pass: the
    pod stays pending until the deadline, with the error as what is known.
    """
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Succeeded":
        return "passed", ""
    if phase == "Failed":
        return "failed", str(status.get("message") or status.get("reason") or "the check failed")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
            message = str(waiting.get("message") or "")
            detail = f"image pull failed ({waiting['reason']}): {message}".rstrip(": ")
            return ("failed" if any(s in message for s in _NO_CONNECTION) else "pending"), detail
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("status") == "False":
        return "pending", f"not scheduled: {scheduled.get('message') or scheduled.get('reason')}"
    return "pending", f"{phase}"
