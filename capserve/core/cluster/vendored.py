"""Upstream manifests shipped as package data (``manifests/``), each pinned by its source and checksum (pure).

Each file is an upstream project's own rendering, not a retyped copy (docs/serving.md §2, §5.2): the LWS
release manifests (kustomize ``config/default`` at the tag), the EFA device plugin chart's DaemonSet
rendered with its default values, and the NVIDIA device plugin's static manifest as released.
``capserve.core.cluster.addons`` patches only placement and labels.
``tests/unit/test_vendored_manifests.py`` checks each file's sha256 against the one recorded here, so an
edit of a vendored file shows as a failing test, not as a silent drift from upstream.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Vendored:
    file: str  # under capserve/core/cluster/manifests/
    repository: str  # github.com/<owner>/<name>
    version: str  # the release (tag or chart version) rendered
    commit: str  # the commit the file was rendered from
    source: str  # the path(s) inside the repository
    sha256: str  # of the file as shipped (header included)


LWS = Vendored(
    file="lws-v0.10.0.yaml",
    repository="kubernetes-sigs/lws",
    version="v0.10.0",
    commit="2161f38ff333f9e24d3c44adef7cd5d9787cac00",
    source="config/default (the release's manifests.yaml; image registry.k8s.io/lws/lws:v0.10.0)",
    sha256="451515bb5b546cf2c3667c1cde5d46cf83e693d1790bcb92a8e58057d99e278b",
)
EFA_DEVICE_PLUGIN = Vendored(
    file="aws-efa-k8s-device-plugin-v0.5.30.yaml",
    repository="aws/eks-charts",
    version="chart v0.5.30 (appVersion v0.5.20)",
    commit="5239609242f3430be50fb0b714a24d3ef2b47983",
    source="stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml with values.yaml",
    sha256="704b3699ec4e47c72738859ea99191903efa4b3d58dc95fd1669b3656566ca0e",
)
NVIDIA_DEVICE_PLUGIN = Vendored(
    file="nvidia-device-plugin-v0.17.4.yaml",
    repository="NVIDIA/k8s-device-plugin",
    version="v0.17.4",  # what the EKS user guide installs (docs/serving.md §5.2)
    commit="fd56a747defe15333adce40fcd3a06ffb129251b",
    source="deployments/static/nvidia-device-plugin.yml (image nvcr.io/nvidia/k8s-device-plugin:v0.17.4)",
    sha256="941649447b8b5e01887531c57961b47dec6aae65755519f120226aa7ea80faf8",
)
VENDORED = (LWS, EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN)


def vendored_bytes(vendored: Vendored) -> bytes:
    return resources.files("capserve.core.cluster").joinpath(f"manifests/{vendored.file}").read_bytes()


@cache
def _parsed(vendored: Vendored) -> tuple[Manifest, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader parses LWS's 2.8 MB in ~0.3 s
    documents = yaml.load_all(vendored_bytes(vendored), Loader=loader)
    return tuple(doc for doc in documents if doc)


def load(vendored: Vendored, kind: str | None = None) -> list[Manifest]:
    """The file's objects (of ``kind``, if given), in the file's order; fresh copies (callers patch them)."""
    return [copy.deepcopy(doc) for doc in _parsed(vendored) if kind is None or doc.get("kind") == kind]
