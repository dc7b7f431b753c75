"""Start the serving image's pre-pull on the GPU nodes (``capserve.core.rollout.prepull``): apply, never wait."""

from __future__ import annotations

from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.result import ClusterResult
from capserve.core.rollout.prepull import prepull_objects
from capserve.core.rollout.settings import RolloutSettings
from capserve.tasks.kube import api_client_for_eks, apply, apply_job
from capserve.tasks.resilience import kube_task


@kube_task(name="start-image-prepull", cache_policy=NO_CACHE)
def start_image_prepull(cluster: ClusterResult, campaign_id: str, image: str, settings: RolloutSettings) -> int:
    """Apply one pre-pull Job per GPU node of ``cluster``; how many were applied."""
    api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, cluster.region)
    objects = prepull_objects(campaign_id, image, cluster.node_names, settings.prepull_deadline_s)
    for obj in objects:
        if obj["kind"] == "Job":
            apply_job(api, obj)  # a Job of another image under the same name is made again
        else:
            apply(api, obj)
    return len(objects) - 1
