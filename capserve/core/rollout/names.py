"""Deterministic names and labels of everything the rollout creates.

Two colours alternate: a rollout creates the colour that is not serving, so the old and the new
workloads never share a name (blue/green), and a retry of the same rollout finds what it made.
Names stay short: LWS pods are ``<workload>-<group>`` and ``<workload>-<group>-<worker>``, and the
leader's hostname must be a DNS label.
"""

from __future__ import annotations

from typing import Literal

from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.weights.node_staging import staging_namespace

Color = Literal["blue", "green"]

COMPONENT_LABEL = "capserve.io/component"
COMPONENT = "vllm"
ROLLOUT_LABEL = "capserve.io/rollout"  # the workload (colour) a pod belongs to
ROLE_LABEL = "capserve.io/role"  # leader | worker
REVISION_LABEL = "capserve.io/revision"  # RolloutConfig.revision: what configuration runs

# Not "vllm": a Service called vllm makes Kubernetes inject VLLM_PORT=tcp://… into pods of the
# namespace, which vLLM reads as its own port setting and refuses (docs/serving.md §3.1).
ENDPOINT_SERVICE = "serving"
API_KEY_SECRET = "serving-api-key"  # noqa: S105 - the name of a Kubernetes Secret, not its value
API_KEY_SECRET_KEY = "api-key"  # noqa: S105 - the key inside the Secret, not its value


def serving_namespace(campaign_id: str) -> str:
    """The campaign's namespace, shared with the staging Jobs (teardown removes it in one go)."""
    return staging_namespace(campaign_id)


def workload_name(color: Color) -> str:
    return f"vllm-{color}"


def other_color(color: Color) -> Color:
    return "green" if color == "blue" else "blue"


def cache_save_job_name(color: Color, node_index: int) -> str:
    return f"vllm-{color}-cache-save-n{node_index}"


def base_labels(campaign_id: str) -> dict[str, str]:
    return {CAMPAIGN_TAG: campaign_id, COMPONENT_LABEL: COMPONENT}
