"""The fake API server's admission with LWS's webhooks (capserve_sandbox.kube.admission, lws_manager):
what a real cluster refuses without the manager and its certificate, and what only the webhook adds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from capserve_sandbox.kube import FakeKube
from capserve_sandbox.kube.pods import is_ready
from kubernetes import client as k8s

from capserve.core.cluster.addons import AddonOptions, lws_controller, lws_crd, lws_probe
from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import WaitTimeoutError
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import events, get, install_lws, until

GROUP = "leaderworkerset.x-k8s.io"
NO_ENDPOINTS = (
    'Internal error occurred: failed calling webhook "mleaderworkerset.kb.io": failed to call webhook: '
    'Post "https://lws-webhook-service.lws-system.svc:443/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset'
    '?timeout=10s": no endpoints available for service "lws-webhook-service"'
)


def lws(name: str, size: int = 2, **spec: Any) -> dict[str, Any]:
    pod = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": pod}}, **spec},
    }


def create(api: k8s.ApiClient, body: dict[str, Any], **options: Any) -> dict[str, Any]:
    created: dict[str, Any] = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, "v1", body["metadata"]["namespace"], "leaderworkersets", body, **options
    )
    return created


def refusal(api: k8s.ApiClient, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(k8s.ApiException) as raised:
        create(api, body)
    return int(raised.value.status), str(json.loads(raised.value.body)["message"])


def settle(kube: FakeKube) -> None:
    """Two controller passes now (the fake runs them on changes; these make sure none is still to come)."""
    for _ in range(2):
        kube._on_loop(kube._run_pass)


def test_without_a_ready_manager_an_lws_is_refused_with_the_api_servers_words(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    for manifest in lws_controller(AddonOptions(campaign_id="t")):  # no node: the manager stays Pending
        tasks_kube.apply(api, manifest)
    assert refusal(api, lws("serve")) == (500, NO_ENDPOINTS)
    assert kube.objects("leaderworkersets", GROUP) == []
    # The same refusal stops bring-up's proof, which says what it waited for.
    with pytest.raises(WaitTimeoutError, match="LWS webhooks not ready after 1 s: .*no endpoints available"):
        tasks_kube.prove_lws_webhooks(api, lws_probe(), KubeSettings(addons_ready_timeout_s=1))


def test_the_old_install_crd_and_a_manager_without_certificate_never_makes_pods(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    """What addons.py rendered before: the CRD and a manager Deployment, no Secret, no webhooks."""
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    selector = {"app.kubernetes.io/name": "lws-controller-manager"}
    old = [
        lws_crd(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lws-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "lws-controller-manager", "namespace": "lws-system", "labels": selector},
         "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": {
             "metadata": {"labels": selector},
             "spec": {"containers": [{"name": "manager", "image": "registry.k8s.io/lws/lws:v0.10.0",
                                      "args": ["--zap-log-level=2", "--leader-elect"]}]}}}},
    ]
    for manifest in old:
        tasks_kube.apply(api, manifest)
    until(kube, lambda: any(is_ready(p) for p in kube.objects("pods") if p["metadata"]["namespace"] == "lws-system"),
          what="the old manager pod Ready")
    tasks_kube.apply(api, lws("serve"))  # no webhook registered: accepted ...
    settle(kube)
    # ... and nothing happens: the manager's controllers wait for certificates no rotator can write.
    assert kube.objects("statefulsets", "apps") == []
    assert not [p for p in kube.objects("pods") if p["metadata"]["namespace"] == "default"]


def test_pods_get_the_lws_variables_and_group_labels_only_through_the_webhook(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    for manifest in lws_controller(AddonOptions(campaign_id="t")):
        if manifest["kind"] != "MutatingWebhookConfiguration":  # the manager runs; nobody calls its webhooks
            tasks_kube.apply(api, manifest)
    until(kube, kube.cluster.lws_manager.ready, what="the LWS manager up")
    tasks_kube.apply(api, lws("bare"))
    worker = until(kube, lambda: kube.store.objects.get(("", "pods", "default", "bare-0-1")), what="a worker pod")
    leader = get(kube, "pods", "bare-0")
    for pod in (leader, worker):
        names = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env") or []}
        assert not names & {"LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"}
    assert "leaderworkerset.sigs.k8s.io/group-index" not in leader["metadata"]["labels"]
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in worker["metadata"]["labels"]


def test_a_dry_run_passes_the_webhooks_and_stores_nothing(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    install_lws(kube, api)
    seen = len(kube.store.events)
    answer = tasks_kube.prove_lws_webhooks(api, lws_probe(), KubeSettings(addons_ready_timeout_s=5))
    assert answer["spec"]["networkConfig"] == {"subdomainPolicy": "Shared"}  # the mutating webhook's default
    assert answer["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"] == 1
    # Nothing stored and no event about it (the cluster's own controllers may still write meanwhile).
    assert kube.objects("leaderworkersets", GROUP) == []
    assert not [e for e in kube.store.events[seen:] if e.plural == "leaderworkersets"]
    with pytest.raises(k8s.ApiException, match="supported values"):
        create(api, lws("maybe"), dry_run="Some")


def test_the_validating_webhook_refuses_what_lws_refuses(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    install_lws(kube, api)
    stuck = lws("stuck", rolloutStrategy={"type": "RollingUpdate", "rollingUpdateConfiguration": {
        "maxUnavailable": 0, "maxSurge": 0}})
    assert refusal(api, stuck) == (
        403,
        'admission webhook "vleaderworkerset.kb.io" denied the request: spec.rolloutStrategy.'
        "rollingUpdateConfiguration.maxUnavailable: Invalid value: 0: must not be 0 when `maxSurge` is 0",
    )


def test_worker_pods_wait_while_the_pod_webhook_cannot_be_called(kube: FakeKube, api: k8s.ApiClient) -> None:
    """The manager's pods go away after the group was made: the StatefulSet controller's creates fail."""
    kube.provision_nodes("system", 2, instance_type="m7i.large")
    install_lws(kube, api)
    tasks_kube.apply(api, lws("later", size=1, replicas=1))
    until(kube, lambda: kube.store.objects.get(("", "pods", "default", "later-0")), what="the leader pod")
    k8s.AppsV1Api(api).delete_namespaced_deployment("lws-controller-manager", "lws-system")
    endpoints = ("", "endpoints", "lws-system", "lws-webhook-service")
    until(kube, lambda: not (kube.store.objects.get(endpoints) or {}).get("subsets"), what="no webhook endpoint")
    k8s.CoreV1Api(api).delete_namespaced_pod("later-0", "default")
    failed = until(kube, lambda: events(kube, "later", "FailedCreate"), what="the StatefulSet's refused create")
    assert 'failed calling webhook "mpod.kb.io"' in failed[0]["message"]
    assert 'no endpoints available for service "lws-webhook-service"' in failed[0]["message"]
