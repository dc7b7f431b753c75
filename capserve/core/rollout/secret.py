"""The endpoint's API key: a Kubernetes Secret the campaign creates, read by the leader pod by reference.

The key itself is only ever in the Secret's ``data`` (sent to the API server, never written out).
The pod spec names the Secret (``valueFrom.secretKeyRef``) and the argument list carries the
reference ``$(VLLM_API_KEY)``, which the kubelet fills in when the container starts; so neither the
LeaderWorkerSet, nor a manifest written to disk, nor the arguments in the report contain the key.
vLLM itself redacts ``--api-key`` from its logs (docs/serving.md §6).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from capserve.core.rollout.names import API_KEY_SECRET, API_KEY_SECRET_KEY, base_labels

REDACTED = "<redacted>"


def api_key_secret(namespace: str, campaign_id: str, key: SecretStr) -> dict[str, Any]:
    """The Secret holding the endpoint's API key (send it to the API server; never log or write it)."""
    value = key.get_secret_value()
    if not value or any(ch.isspace() for ch in value):
        raise ValueError("the endpoint API key must be non-empty and contain no whitespace")
    labels = {**base_labels(campaign_id), "capserve.io/component": "api-key"}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": API_KEY_SECRET, "namespace": namespace, "labels": labels},
        "type": "Opaque",
        "data": {API_KEY_SECRET_KEY: base64.b64encode(value.encode("utf-8")).decode("ascii")},
    }


def api_key_env(env_name: str) -> dict[str, Any]:
    """The container env entry that reads the key from the Secret."""
    return {"name": env_name, "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": API_KEY_SECRET_KEY}}}


def redact_for_disk(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to write to ``out/<run>/manifests/``: a Secret's values replaced by ``<redacted>``."""
    safe = copy.deepcopy(dict(manifest))
    if safe.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(safe.get(field), dict):
                safe[field] = {name: REDACTED for name in safe[field]}
    return safe
