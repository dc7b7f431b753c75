"""Fixtures for the Kubernetes layer: a fake API server per test and a client built by our code."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from capserve_sandbox.kube import FakeKube, fake_kube
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.tasks import kube as tasks_kube


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    """Cluster time 600x faster (probes, back-offs, deadlines): a 10-minute progress deadline is 1 s."""
    with fake_kube(time_scale=600) as server:
        yield server


@pytest.fixture
def api(kube: FakeKube) -> Iterator[k8s.ApiClient]:
    client = tasks_kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
    yield client
    client.close()


@pytest.fixture
def quick() -> KubeSettings:
    """Short timeouts: the waits under test either succeed at once or are meant to time out."""
    return KubeSettings(nodes_ready_timeout_s=2, addons_ready_timeout_s=2, watch_window_s=1, request_timeout_s=5)


@pytest.fixture
def patient() -> KubeSettings:
    """Generous timeouts for waits expected to succeed (or fail terminally): a loaded CI box must not flake them."""
    return KubeSettings(nodes_ready_timeout_s=60, addons_ready_timeout_s=60, watch_window_s=5, request_timeout_s=30)
