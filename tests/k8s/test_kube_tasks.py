"""capserve.tasks.kube against the fake API server: clients, tokens, apply, and the waits."""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, unquote, urlsplit

import boto3
import pytest
import urllib3
from capserve_sandbox.aws import moto_sandbox, patched_environ
from capserve_sandbox.kube import FakeKube
from capserve_sandbox.kube.auth import eks_token_problem
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.cluster.addons import AddonOptions, render_addons
from capserve.core.cluster.readiness import NodeExpectation, Readiness
from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import ClusterGoneError, PermanentError, WaitTimeoutError
from capserve.core.progress import PREFIX, unstamped
from capserve.tasks import kube as tasks_kube

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDSANDBOX",
    "AWS_SECRET_ACCESS_KEY": "sandbox-secret",
    "AWS_SESSION_TOKEN": "",
    "AWS_EC2_METADATA_DISABLED": "true",
}
GPU = {"capserve.io/pool": "gpu"}
EXPECT = NodeExpectation(count=2, gpus_per_node=8, efa_per_node=16, node_labels=GPU)


def deployment(name: str = "web", image: str = "busybox:1") -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"capserve.io/campaign": "t"}},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": image}]}},
        },
    }


# ----------------------------------------------------------------------------- tokens and clients


def test_eks_token_is_what_aws_eks_get_token_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    # AWS's own STS endpoint in the signed URL (presigning calls nothing; tests point AWS at 127.0.0.1).
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with patched_environ(AWS_ENV):
        token = tasks_kube.eks_token("capserve-demo", "us-east-2")
    value = token.get_secret_value()
    assert "k8s-aws-v1." not in repr(token)  # SecretStr hides it
    assert value.startswith("k8s-aws-v1.") and "=" not in value
    encoded = value[len("k8s-aws-v1.") :]
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert query["Action"] == "GetCallerIdentity" and query["X-Amz-Expires"] == "60"
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"].split(";")
    assert "sts" in urlsplit(url).netloc and "us-east-2" in query["X-Amz-Credential"]
    assert eks_token_problem(value) is None


def test_eks_client_authenticates_with_a_fresh_token(kube: FakeKube) -> None:
    with patched_environ(AWS_ENV):
        api = tasks_kube.api_client_for_eks(kube.url, None, "capserve-demo", "us-east-2")
        k8s.CoreV1Api(api).list_namespace()
    assert kube.requests[-1].auth == "eks"
    assert "k8s-aws-v1." not in str(api.configuration.to_debug_report())


def test_token_is_refreshed_before_it_expires(kube: FakeKube) -> None:
    now = [0.0]
    issued: list[str] = []

    def provider() -> SecretStr:
        issued.append(kube.token)
        return SecretStr(kube.token)

    api = tasks_kube.api_client(
        kube.url,
        None,
        provider,
        token_lifetime_s=840,
        settings=KubeSettings(token_refresh_margin_s=120),
        clock=lambda: now[0],
    )
    v1 = k8s.CoreV1Api(api)
    v1.list_namespace()
    v1.list_namespace()
    assert len(issued) == 1
    now[0] = 719  # 840 - 120 - 1: still fresh
    v1.list_namespace()
    assert len(issued) == 1
    now[0] = 721
    v1.list_namespace()
    assert len(issued) == 2


def test_requests_without_an_accepted_token_are_refused(kube: FakeKube) -> None:
    anonymous = k8s.ApiClient(k8s.Configuration(host=kube.url))
    with pytest.raises(k8s.ApiException) as refused:
        k8s.CoreV1Api(anonymous).list_node()
    assert refused.value.status == 401
    forged = tasks_kube.api_client(kube.url, None, lambda: SecretStr("k8s-aws-v1.bm90LWEtdXJs"))
    with pytest.raises(PermanentError, match="401.*access entry"):
        tasks_kube.apply(forged, deployment())


def test_ca_data_is_decoded_in_memory() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    api = tasks_kube.api_client(
        "https://example.invalid", base64.b64encode(pem.encode()).decode(), lambda: SecretStr("t")
    )
    assert api.configuration.ca_cert_data == pem and api.configuration.ssl_ca_cert is None
    with pytest.raises(PermanentError, match="neither PEM nor base64"):
        tasks_kube.api_client("https://example.invalid", "not base64!", lambda: SecretStr("t"))


# ----------------------------------------------------------------------------- apply


def test_apply_is_server_side_and_idempotent(kube: FakeKube, api: k8s.ApiClient) -> None:
    first = tasks_kube.apply(api, deployment())
    second = tasks_kube.apply(api, deployment())
    assert first["metadata"]["generation"] == second["metadata"]["generation"] == 1
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    managers = {(m["manager"], m["operation"]) for m in second["metadata"]["managedFields"]}
    assert ("capserve", "Apply") in managers
    patches = [r for r in kube.requests if r.method == "PATCH"]
    assert patches and all(r.content_type == "application/apply-patch+yaml" for r in patches)
    assert all("fieldManager=capserve" in r.path and "force=true" in r.path.lower() for r in patches)
    changed = tasks_kube.apply(api, deployment(image="busybox:2"))
    assert changed["metadata"]["generation"] == 2


def test_apply_of_an_unknown_kind_names_the_missing_crd(api: k8s.ApiClient) -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {},
    }
    with pytest.raises(PermanentError, match="does not serve this kind.*CRD"):
        tasks_kube.apply(api, lws)


def test_invalid_objects_are_rejected_permanently(api: k8s.ApiClient) -> None:
    bad = deployment()
    bad["spec"]["replcas"] = 2  # a typo: strict validation catches it
    with pytest.raises(PermanentError, match="422"):
        tasks_kube.apply(api, bad)


# ----------------------------------------------------------------------------- GPU node wait


def test_wait_follows_nodes_turning_ready_through_the_watch(
    kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings
) -> None:
    # The devices are the AMI's own here (device_plugins="builtin"): this is about the wait, not the plugins.
    names = kube.provision_nodes("gpu", 2, labels=GPU, failure="never-ready", device_plugins="builtin")
    kube.provision_nodes("system", 1, instance_type="m7i.large", labels={"capserve.io/pool": "system"})
    result: list[Readiness] = []
    waiter = threading.Thread(target=lambda: result.append(tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, patient)))
    waiter.start()
    while not any("watch=true" in r.path and "/nodes" in r.path for r in kube.requests) and waiter.is_alive():
        time.sleep(0.02)  # until the wait is watching: then the change below must reach it as an event
    for name in names:
        kube.set_node_ready(name)
    waiter.join(timeout=120)
    assert result and result[0].ready and result[0].gpus_allocatable == 16
    node_requests = [r for r in kube.requests if r.path.startswith("/api/v1/nodes")]
    assert all("labelSelector=capserve.io/pool=gpu" in unquote(r.path) for r in node_requests)


def test_the_node_wait_logs_a_line_per_node_turning_ready_and_none_for_the_same_state(
    kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings, caplog: pytest.LogCaptureFixture
) -> None:
    names = kube.provision_nodes("gpu", 2, labels=GPU, failure="never-ready", device_plugins="builtin")
    done = threading.Event()

    def wait() -> None:
        tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, patient)
        done.set()

    with caplog.at_level(logging.INFO, logger="capserve.tasks.progress"):
        waiter = threading.Thread(target=wait)
        waiter.start()
        while not any("watch=true" in r.path and "/nodes" in r.path for r in kube.requests) and waiter.is_alive():
            time.sleep(0.02)
        for name in names:
            kube.set_node_ready(name)
        waiter.join(timeout=120)
    assert done.is_set()
    lines = [unstamped(r.getMessage().removeprefix(PREFIX))[1] for r in caplog.records
             if r.getMessage().startswith(PREFIX)]
    assert lines == [f"GPU nodes joined 2/2 ({ready} ready with 8 GPUs each)" for ready in (0, 1, 2)]


@pytest.mark.parametrize(
    ("failure", "cause"),
    [
        ("never-ready", "NotReady (KubeletNotReady)"),
        ("no-gpus", "GPUs not advertised (nvidia.com/gpu 0 of 8)"),
        ("health-check-failed", "health check failed"),
    ],
)
def test_a_broken_node_ends_the_wait_naming_node_and_cause(
    kube: FakeKube, api: k8s.ApiClient, quick: KubeSettings, failure: str, cause: str
) -> None:
    (good,) = kube.provision_nodes("gpu", 1, labels=GPU, device_plugins="builtin")
    (bad,) = kube.provision_nodes("gpu", 1, labels=GPU, failure=failure, device_plugins="builtin")
    with pytest.raises(PermanentError) as ended:
        tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, quick)
    message = str(ended.value)
    assert f"{bad}: {cause}" in message and "1 of 2 GPU nodes ready" in message
    assert good not in message.split("ready;")[-1]


def test_nodes_that_never_join_are_reported(api: k8s.ApiClient, quick: KubeSettings) -> None:
    with pytest.raises(PermanentError, match=r"0 of 2 GPU nodes ready.*<not joined #2>: not joined"):
        tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, quick)


def test_an_expired_watch_is_answered_by_listing_again(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("gpu", 1, labels=GPU, device_plugins="builtin")
    kube.compact()  # any resourceVersion the wait lists at is now at the edge of history
    kube.provision_nodes("gpu", 1, labels=GPU, ready_after_s=0.5, device_plugins="builtin")
    loop = kube._api.loop
    assert loop is not None
    loop.call_soon_threadsafe(loop.call_later, 0.2, kube.compact)  # expires the watch in flight
    settings = KubeSettings(nodes_ready_timeout_s=5, watch_window_s=1)
    assert tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, settings).ready


# ----------------------------------------------------------------------------- a cluster deleted under a wait


@pytest.fixture
def eks_cluster() -> Iterator[str]:
    """An EKS cluster in the sandbox's AWS (moto); the fake API server stands for its API."""
    with moto_sandbox("us-east-2"):
        boto3.client("eks").create_cluster(
            name="capserve-gone", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": []}
        )
        yield "capserve-gone"


def test_a_wait_on_a_cluster_deleted_under_it_ends_naming_it(kube: FakeKube, eks_cluster: str) -> None:
    # The nodes never join: only the cluster's deletion (the block's scheduled teardown) can end this wait early.
    api = tasks_kube.api_client_for_eks(kube.url, None, eks_cluster, "us-east-2")
    settings = KubeSettings(nodes_ready_timeout_s=60, watch_window_s=60, cluster_check_s=1)
    ended: list[BaseException] = []

    def wait() -> None:
        try:
            tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, settings)
        except BaseException as exc:  # noqa: BLE001 - whatever ended the wait is what the test looks at
            ended.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    while not any("watch=true" in r.path and "/nodes" in r.path for r in kube.requests) and waiter.is_alive():
        time.sleep(0.02)  # until the wait is watching a quiet cluster
    boto3.client("eks").delete_cluster(name=eks_cluster)
    waiter.join(timeout=300)
    assert len(ended) == 1 and isinstance(ended[0], ClusterGoneError), ended
    message = str(ended[0])
    assert message.startswith("watch of GPU nodes: EKS cluster capserve-gone (us-east-2) no longer exists "
                              "(DescribeCluster: ResourceNotFoundException)"), message


def test_an_api_server_gone_with_its_cluster_is_not_retried(eks_cluster: str) -> None:
    # A deleted EKS cluster's API server no longer answers (its DNS name goes with it): a connection error that
    # would otherwise be retried as transient.
    boto3.client("eks").delete_cluster(name=eks_cluster)
    api = tasks_kube.api_client_for_eks("http://127.0.0.1:9", None, eks_cluster, "us-east-2")
    with pytest.raises(ClusterGoneError, match="EKS cluster capserve-gone .us-east-2. no longer exists"):
        tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, KubeSettings(request_timeout_s=5))


# ----------------------------------------------------------------------------- add-ons


def test_addons_apply_and_report_ready(kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings) -> None:
    kube.provision_nodes("gpu", 2, labels=GPU)  # untainted, so the controllers may run there too
    manifests = render_addons(AddonOptions(campaign_id="demo", gpu_node_labels=GPU))
    applied = tasks_kube.apply_addons.fn(api, manifests, patient)
    assert len(applied) == len(manifests)
    outcome = tasks_kube.wait_addons_ready.fn(api, manifests, patient)
    assert outcome["DaemonSet kube-system/nvidia-device-plugin-daemonset"] == "2/2 ready"
    assert outcome["CustomResourceDefinition leaderworkersets.leaderworkerset.x-k8s.io"] == "Established"
    # The LWS kind is served once its CRD is in: roll-out can apply LeaderWorkerSets.
    assert tasks_kube.apply_addons.fn(api, manifests, patient)[0]["metadata"]["generation"] == 1


def test_a_failed_addon_is_reported_with_its_reason(kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.xlarge")
    kube.set_outcome("fail", kind="Deployment", name="fsx-csi-controller")  # its pods crash-loop
    manifests = render_addons(AddonOptions(campaign_id="demo", lws=False, fsx=True))
    tasks_kube.apply_addons.fn(api, manifests, patient)
    with pytest.raises(
        PermanentError, match="Deployment kube-system/fsx-csi-controller failed: ProgressDeadlineExceeded"
    ):
        tasks_kube.wait_addons_ready.fn(api, manifests, patient)


def test_addons_still_progressing_at_the_deadline_are_named(
    kube: FakeKube, api: k8s.ApiClient, quick: KubeSettings
) -> None:
    kube.provision_nodes("gpu", 1, labels=GPU)
    kube.set_outcome("never", kind="DaemonSet", name="nvidia-device-plugin-daemonset")  # its image never pulls
    manifests = render_addons(AddonOptions(campaign_id="demo", gpu_node_labels=GPU, efa=False, fsx=False, lws=False))
    tasks_kube.apply_addons.fn(api, manifests, quick)
    with pytest.raises(
        WaitTimeoutError, match="add-ons not ready after 2 s: DaemonSet kube-system/nvidia-device-plugin-daemonset: 0/1"
    ):
        tasks_kube.wait_addons_ready.fn(api, manifests, quick)


def test_job_outcomes(kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "stage", "namespace": "default"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    tasks_kube.apply(api, job)
    assert tasks_kube.wait_addons_ready.fn(api, [job], patient) == {"Job default/stage": "Complete"}
    kube.set_outcome("fail", kind="Job", name="stage-2")
    failing = {**job, "metadata": {"name": "stage-2", "namespace": "default"}}
    tasks_kube.apply(api, failing)
    with pytest.raises(PermanentError, match="Job default/stage-2 failed: BackoffLimitExceeded"):
        tasks_kube.wait_addons_ready.fn(api, [failing], patient)


def test_nodes_registering_not_ready_turn_ready_later(
    kube: FakeKube, api: k8s.ApiClient, patient: KubeSettings
) -> None:
    kube.provision_nodes("gpu", 2, labels=GPU, ready_after_s=0.1, device_plugins="builtin")
    assert tasks_kube.wait_gpu_nodes_ready.fn(api, EXPECT, patient).ready_nodes == 2


# ----------------------------------------------------------------------------- waits keep their deadline


class FakeTime:
    """time.monotonic and time.sleep for capserve.tasks.kube: sleeping moves the clock, nothing else does."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class DroppingNodes:
    """The Node resource and its watch: the first ``drops`` watches break off as a dropped connection does; the
    others run out their window (a fake clock's) with no event. No node ever joins."""

    def __init__(self, clock: FakeTime, drops: int) -> None:
        self.clock, self.drops, self.watches, self.lists = clock, drops, 0, 0
        self.client = k8s.ApiClient()  # not made for an EKS cluster: no DescribeCluster between watches

    def get(self, **_: object) -> object:
        self.lists += 1
        listing = {"items": [], "metadata": {"resourceVersion": str(self.lists)}}
        return type("Listing", (), {"to_dict": lambda _self: listing})()

    def watch(self, resource: object, *, timeout: int, **_: object) -> Iterator[dict]:
        self.watches += 1
        if self.watches <= self.drops:
            raise urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
        self.clock.now += timeout
        return iter(())


def test_a_wait_whose_watch_drops_twice_still_ends_at_its_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeTime()
    nodes = DroppingNodes(clock, drops=2)
    monkeypatch.setattr(tasks_kube, "time", clock)
    monkeypatch.setattr(tasks_kube, "dynamic_client", lambda api: nodes)
    monkeypatch.setattr(tasks_kube, "_resource", lambda dyn, version, kind: nodes)
    settings = KubeSettings(nodes_ready_timeout_s=120, watch_window_s=30, reconnect_max_s=4)
    started = clock.now

    with pytest.raises(WaitTimeoutError, match="GPU nodes not ready after 120 s: 0 of 2 GPU nodes ready"):
        tasks_kube.wait_gpu_nodes_ready.fn(None, EXPECT, settings)  # type: ignore[arg-type]

    assert (nodes.watches > 2, nodes.lists) == (True, 3)  # listed again after each drop, then watched on
    assert clock.now - started == 120  # the one deadline: the drops neither ended nor extended it
    assert tasks_kube.wait_gpu_nodes_ready.retries == 0  # and the task is not retried with a fresh one
