"""The staging Job capserve renders really runs in the sandbox: it copies from S3 onto the node and verifies."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import iam_enforced, moto_sandbox
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube import FakeKube, fake_kube
from capserve_sandbox.kube.kubelet.played_start import INDEX, StandsFor
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.timeline import s3_to_node_s
from capserve.core.weights.manifest import StagedFile, WeightsManifest, s3_base
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import render_staging_job
from capserve.tasks import kube as tasks_kube
from capserve.tasks.weights.node_staging import copy_tool_source
from tests.sandbox.conftest import GPU_TAINT, condition, get, until

BUCKET = "capserve-staging-test"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with moto_sandbox("us-east-2"):
        boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        yield


@pytest.fixture
def cluster(aws: None) -> Iterator[tuple[FakeKube, k8s.ApiClient]]:
    with fake_kube(time_scale=600) as kube:
        yield kube, tasks_kube.api_client(kube.url, None, lambda: SecretStr(kube.token))


# Where the staging Job writes on an NVMe node (the RAID0 array nodeadm mounts).
WEIGHTS_ON_NVME = WeightsSettings().nvme_path


def publish(repo: str, corrupt: str | None = None) -> WeightsManifest:
    """Files in S3 as the weights stage publishes them, and their manifest (``corrupt``: its S3 copy differs)."""
    s3 = boto3.client("s3")
    files = []
    for index in range(4):
        key = f"model-0000{index}-of-00004.safetensors"
        body = f"tensor bytes {index} ".encode() * 512
        s3.put_object(
            Bucket=BUCKET, Key=f"{s3_base('models', repo, SHA)}/{key}", Body=b"tampered" if key == corrupt else body
        )
        files.append(StagedFile(key=key, dest=key, size=len(body), sha256=hashlib.sha256(body).hexdigest()))
    return WeightsManifest(repo=repo, revision_sha=SHA, layout_id="full", nodes=1, files=tuple(files))


def stage(
    kube: FakeKube, api: k8s.ApiClient, manifest: WeightsManifest, settings: WeightsSettings | None = None,
    **node: Any,
) -> tuple[dict[str, Any], str]:
    (node_name,) = kube.provision_nodes("gpu", 1, taints=[GPU_TAINT], **node)
    job = render_staging_job(
        manifest,
        node=0,
        campaign_id="t",
        namespace="default",
        bucket=BUCKET,
        prefix="models",
        node_target="nvme",
        node_name=node_name,
        settings=settings,
        tool_source=copy_tool_source(),
    )
    job["spec"]["backoffLimit"] = 1
    tasks_kube.apply_job(api, job)  # a second stage on one cluster makes the Job again
    name = job["metadata"]["name"]
    until(
        kube,
        lambda: (
            condition(get(kube, "jobs", name, "batch"), "Complete")
            or condition(get(kube, "jobs", name, "batch"), "Failed")
        ),
        timeout_s=60,
        what="the staging Job finished",
    )
    return get(kube, "jobs", name, "batch"), node_name


def test_the_staging_job_copies_and_verifies_every_file_onto_its_node(cluster: tuple[FakeKube, k8s.ApiClient]) -> None:
    kube, api = cluster
    manifest = publish("org/good")
    job, node = stage(kube, api, manifest)
    assert condition(job, "Complete")["status"] == "True"
    target = kube.kubelet.layout.host_path(node, f"{WEIGHTS_ON_NVME}/org/good/{SHA}")
    s3 = boto3.client("s3")
    for staged in manifest.files:
        body = s3.get_object(Bucket=BUCKET, Key=f"{s3_base('models', 'org/good', SHA)}/{staged.key}")["Body"].read()
        assert (target / staged.dest).read_bytes() == body
    assert not list(target.glob("*.partial"))
    [pod] = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(job["metadata"]["name"])]
    log = k8s.CoreV1Api(api).read_namespaced_pod_log(pod["metadata"]["name"], "default")
    assert f"staged 4 files into {target}" in log  # the container's path, as the node's directory


def test_a_sha256_mismatch_fails_the_job(cluster: tuple[FakeKube, k8s.ApiClient]) -> None:
    kube, api = cluster
    bad = "model-00002-of-00004.safetensors"
    job, node = stage(kube, api, publish("org/bad", corrupt=bad))
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2  # the first pod and its one retry
    target = kube.kubelet.layout.host_path(node, f"{WEIGHTS_ON_NVME}/org/bad/{SHA}")
    assert not (target / bad).exists() and not (target / f"{bad}.partial").exists()
    pods = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(job["metadata"]["name"])]
    log = k8s.CoreV1Api(api).read_namespaced_pod_log(pods[0]["metadata"]["name"], "default")
    assert f"sha256 mismatch for {bad}" in log


def test_the_aws_shim_refuses_what_it_does_not_implement(cluster: tuple[FakeKube, k8s.ApiClient]) -> None:
    kube, api = cluster
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    tasks_kube.apply(
        api,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "s3api", "namespace": "default"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "aws",
                                "image": "public.ecr.aws/aws-cli/aws-cli:2.27.50",
                                "command": ["/bin/sh", "-c", "aws s3api list-buckets"],
                            }
                        ],
                    }
                },
            },
        },
    )
    until(kube, lambda: condition(get(kube, "jobs", "s3api", "batch"), "Failed"))
    [pod] = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith("s3api-")]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 252
    log = k8s.CoreV1Api(api).read_namespaced_pod_log(pod["metadata"]["name"], "default")
    assert "implements only `aws s3 cp|sync|ls`" in log and "aws s3api list-buckets" in log


def hyperpod_execution_role(name: str) -> str:
    """A role as bring-up made it before this change: only AmazonSageMakerClusterInstanceRolePolicy."""
    iam = boto3.client("iam")
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    iam.attach_role_policy(RoleName=name, PolicyArn="arn:aws:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy")
    return str(arn)


def test_a_hyperpod_nodes_pods_read_s3_only_as_its_execution_role_allows(
    cluster: tuple[FakeKube, k8s.ApiClient],
) -> None:
    from capserve.core.cluster.iam import WEIGHTS_READ_POLICY, weights_read_policy

    kube, api = cluster
    role = hyperpod_execution_role("staging-hp-role")
    on_hyperpod = WeightsSettings().for_cluster("hyperpod")
    hyperpod_node = {"instance_role_arn": role, "host_directories": ("opt/dlami/nvme", "opt/sagemaker")}
    # The managed policy reads sagemaker-* buckets only: the weights bucket is refused as S3 refuses a GET.
    job, _ = stage(kube, api, publish("org/denied"), on_hyperpod, **hyperpod_node)
    assert condition(job, "Failed") is not None
    pods = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(job["metadata"]["name"])]
    log = k8s.CoreV1Api(api).read_namespaced_pod_log(pods[0]["metadata"]["name"], "default")
    assert "An error occurred (AccessDenied) when calling the GetObject operation" in log
    assert "is not authorized to perform: s3:GetObject" in log
    # With capserve's inline policy on the weights prefix the same copy goes through, onto /opt/dlami/nvme.
    boto3.client("iam").put_role_policy(
        RoleName="staging-hp-role", PolicyName=WEIGHTS_READ_POLICY,
        PolicyDocument=weights_read_policy("aws", BUCKET, "models"),
    )
    manifest = publish("org/allowed")
    job, node = stage(kube, api, manifest, on_hyperpod, **hyperpod_node)
    assert condition(job, "Complete")["status"] == "True"
    target = kube.kubelet.layout.host_path(node, f"/opt/dlami/nvme/capserve/weights/org/allowed/{SHA}")
    assert all((target / staged.dest).is_file() for staged in manifest.files)


def test_under_iam_enforcement_a_nodes_pods_call_s3_with_its_role_credentials(
    cluster: tuple[FakeKube, k8s.ApiClient],
) -> None:
    from capserve.core.permissions import Targets, node_policy

    kube, api = cluster
    allowed, refused = publish("org/node-role"), publish("org/bare-role")
    # As an administrator (before enforcement): one role with the generated node policy (docs/iam/node.json, this
    # bucket and prefix filled in), one with no policy at all.
    iam = boto3.client("iam")
    roles = {name: iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
             for name in ("staging-node-role", "staging-bare-role")}
    iam.put_role_policy(RoleName="staging-node-role", PolicyName="capserve-node", PolicyDocument=json.dumps(
        node_policy(Targets(weights_bucket=BUCKET, weights_prefix="models"))))
    with iam_enforced():  # the sandbox's own keys no longer work: only the role's can
        job, node = stage(kube, api, allowed, instance_role_arn=roles["staging-node-role"])
        denied, _ = stage(kube, api, refused, instance_role_arn=roles["staging-bare-role"])

    assert condition(job, "Complete")["status"] == "True"
    target = kube.kubelet.layout.host_path(node, f"{WEIGHTS_ON_NVME}/org/node-role/{SHA}")
    assert all((target / staged.dest).is_file() for staged in allowed.files)
    assert condition(denied, "Failed") is not None
    pods = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(denied["metadata"]["name"])]
    log = k8s.CoreV1Api(api).read_namespaced_pod_log(pods[0]["metadata"]["name"], "default")
    assert "An error occurred (AccessDenied) when calling the GetObject operation" in log


K3_BYTES = 1_555_806_383_232  # the catalog's Kimi K3, as stored


@pytest.fixture
def playing() -> Iterator[None]:
    """A played block on which this test stands for the run that watches the Job: it works, and each watch window
    lets up to 10 s of the block pass (as ``capserve.tasks.kube``'s watches do through the clock)."""
    CLOCK.reset()
    CLOCK.simulate(fast_rate=5760, near_rate=10, near=timedelta(minutes=3), hold=timedelta(minutes=2))
    CLOCK.register([])
    CLOCK.work("staging-test")
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            CLOCK.sleep("staging-test", "watch", 10.0, wait_s=1.0)
            time.sleep(0.05)  # the watch window's own wall time
            CLOCK.awake("staging-test", "watch")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield
    stop.set()
    watcher.join(timeout=10)
    CLOCK.reset()


def test_on_a_simulated_block_the_staging_job_takes_the_modelled_time_of_the_model_its_checkpoint_stands_for(
    cluster: tuple[FakeKube, k8s.ApiClient], playing: None
) -> None:
    kube, api = cluster
    manifest = publish("org/stand-in")
    # An index as the weights stage publishes one per node, under the layout (the shards are the whole checkpoint).
    index = {"metadata": {"total_size": sum(f.size for f in manifest.files)},
             "weight_map": {f"layer.{i}": f.key for i, f in enumerate(manifest.files)}}
    boto3.client("s3").put_object(Bucket=BUCKET, Key=f"{s3_base('models', 'org/stand-in', SHA)}/full/node-0/{INDEX}",
                                  Body=json.dumps(index).encode())
    kube.kubelet.stands_for = StandsFor(model_bytes=K3_BYTES)
    try:
        began = CLOCK.now()
        job, _ = stage(kube, api, manifest, instance_type="p6-b300.48xlarge")
        took = (CLOCK.now() - began).total_seconds()
    finally:
        kube.kubelet.stands_for = None
    assert condition(job, "Complete")["status"] == "True"
    modelled = s3_to_node_s(K3_BYTES, "p6-b300.48xlarge")  # ~3.4 minutes
    [pod] = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(job["metadata"]["name"])]
    ran = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    span = (datetime.fromisoformat(ran["finishedAt"]) - datetime.fromisoformat(ran["startedAt"])).total_seconds()
    # The container's process holds the block's clock from its start to its end but for its copies, which take the
    # model's time: its run on the block is the modelled copy, to the second its stamps are written in, on any host
    # (it was 500-950 s more beside other work, as many 10-s watch windows as its wall seconds let pass).
    assert abs(span - modelled) <= 1, (span, modelled)
    # Around it the fake's control plane (the Job's pod made and bound, the pod's end read into the Job's status) and
    # the kubelet's pull run in wall time and do not hold the clock (docs/sandbox.md, "What is not held yet"): a few
    # of the 10-s windows pass there (25-36 s on a quiet host, up to 110 s at load 20-38).
    assert modelled <= took <= modelled + 300, (took, modelled)
