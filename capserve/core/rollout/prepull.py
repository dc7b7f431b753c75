"""Pre-pulling the serving image on every GPU node while the weights are copied there (pure).

On the block, bring-up is followed by the weights' copy from S3 to each node's NVMe (``weights_to_nodes``,
minutes to hours for a large checkpoint) and only then by the rollout, whose pods pull the ~20 GB image
before vLLM can start. A Job per GPU node that only pulls the image (its container runs ``true``) lets the
kubelet pull it *during* the copy, so the rollout's pods find it "already present on machine" and the pull
leaves the block's critical path. The Jobs are not waited for: a pull that fails shows again, diagnosed, in
the rollout's own pods (``ErrImagePull``). They ask for almost nothing (the vLLM pod takes the node later),
end in seconds once pulled, and are deleted by teardown (they carry the campaign label) or by the Job TTL
controller a day after they finish (Kubernetes "Automatic Cleanup for Finished Jobs"); until then the
rollout reads their pods' ``Pulled`` events for the report.

``/usr/bin/true`` in the vLLM image: the images are Ubuntu-based (vLLM's ``docker/Dockerfile``) [inf].
"""

from __future__ import annotations

from typing import Any

from capserve.core.cluster.addons import GPU_TOLERATIONS
from capserve.core.rollout.names import ROLE_LABEL, base_labels, serving_namespace
from capserve.core.tags import CAMPAIGN_TAG

PREPULL_ROLE = "image-prepull"
TTL_S = 24 * 3600  # kept for the rollout to read its pod's Pulled event; teardown deletes it with the campaign
HOSTNAME_LABEL = "kubernetes.io/hostname"


def prepull_objects(campaign_id: str, image: str, nodes: tuple[str, ...], deadline_s: int) -> list[dict[str, Any]]:
    """The campaign's namespace (as the staging Jobs have it) and one Job per node in ``nodes`` whose pod pulls
    ``image`` there and exits, or is ended after ``deadline_s`` (a pull stuck behind a failing registry)."""
    labels = {**base_labels(campaign_id), ROLE_LABEL: PREPULL_ROLE}
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": serving_namespace(campaign_id), "labels": {CAMPAIGN_TAG: campaign_id}}}
    jobs: list[dict[str, Any]] = [namespace]
    for index, node in enumerate(nodes):
        pod = {
            "metadata": {"labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {HOSTNAME_LABEL: node},
                "tolerations": GPU_TOLERATIONS,
                "containers": [{
                    "name": "pull",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["true"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                }],
            },
        }  # fmt: skip
        jobs.append({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"image-prepull-{index}", "namespace": serving_namespace(campaign_id),
                         "labels": labels},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline_s, "ttlSecondsAfterFinished": TTL_S,
                     "template": pod},
        })  # fmt: skip
    return jobs
