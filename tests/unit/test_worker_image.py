"""deployments/worker/: the worker image's Dockerfile and the Kubernetes work pool's base job template.

The template is checked as Prefect and Kubernetes check it: Prefect's work-pool schema (every placeholder
declared as a variable), its variables as a JSON Schema with valid defaults, then rendered by prefect-kubernetes'
own job configuration for a flow run (as the worker does before creating the Job) and validated, strict, against
the Kubernetes API's OpenAPI schema for batch/v1 Job (kubernetes-validate). The Dockerfile is not built here
(no container runtime): what is checked is that it matches pyproject.toml and the deployments the wheel ships.
prefect-kubernetes (kubernetes_asyncio, kopf, docker: ~1,000 modules, ~1.2 CPU s) and Prefect's server schemas are
imported by the helpers that use them: each process of `make test`'s pool collects this file, one runs it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import tomllib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from prefect.client.schemas.objects import FlowRun

if TYPE_CHECKING:
    from prefect.server.schemas.actions import WorkPoolCreate

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "deployments" / "worker"
TEMPLATE = WORKER / "kubernetes-base-job-template.json"
DOCKERFILE = WORKER / "Dockerfile"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
K8S_VERSION = "1.34"  # the sandbox's fake Kubernetes answers as this version (sandbox/capserve_sandbox/kube/store.py)


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(TEMPLATE.read_text())
    return loaded


def work_pool(base_job_template: dict[str, Any]) -> WorkPoolCreate:
    """The work pool Prefect's API would create from this template (its own validation of it)."""
    from prefect.server.schemas.actions import WorkPoolCreate

    return WorkPoolCreate(name="capserve", type="kubernetes", base_job_template=base_job_template)


def rendered_job(base: dict[str, Any], values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job the Kubernetes worker would create for a flow run of a deployment on this pool."""
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(base, values or {}))
    config.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name="campaign-team-1"))
    return config.job_manifest


def test_prefect_accepts_the_template_as_a_work_pool_s() -> None:
    pool = work_pool(template())
    assert pool.base_job_template["variables"]["properties"]["image"]["default"] == "capserve-worker:0.1.0"


def test_the_variables_are_a_json_schema_and_their_defaults_satisfy_it() -> None:
    variables = template()["variables"]
    jsonschema.Draft202012Validator.check_schema(variables)
    defaults = {name: prop["default"] for name, prop in variables["properties"].items() if "default" in prop}
    jsonschema.validate(defaults, variables)


def test_the_job_for_a_flow_run_is_a_valid_batch_v1_job_with_the_report_volume() -> None:
    job = rendered_job(template(), {"env": {"CAPSERVE_HUB_ENDPOINT": "https://hub.example"}})
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (job["metadata"]["namespace"], pod["serviceAccountName"]) == ("capserve", "capserve-flows")
    assert container["image"] == "capserve-worker:0.1.0"
    assert container["workingDir"] == "/work"
    assert container["volumeMounts"] == [{"name": "out", "mountPath": "/work/out"}]
    assert pod["volumes"] == [{"name": "out", "persistentVolumeClaim": {"claimName": "capserve-out"}}]
    assert {"name": "CAPSERVE_HUB_ENDPOINT", "value": "https://hub.example"} in container["env"]
    assert container["args"][:3] == ["prefect", "flow-run", "execute"]
    # On the Job, not the pod: prefect-kubernetes 0.8.0's default template puts them in the pod's spec, which the
    # API server drops with an unknown-field warning (strict validation refuses it).
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (1, 1)


def test_the_schema_check_refuses_a_misspelt_field() -> None:
    broken = copy.deepcopy(template())
    pod = broken["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    pod["volumes"][0]["persistentVolumeClam"] = pod["volumes"][0].pop("persistentVolumeClaim")
    with pytest.raises(kubernetes_validate.ValidationError, match="persistentVolumeClam"):
        kubernetes_validate.validate(rendered_job(broken), K8S_VERSION, strict=True)


def test_prefect_refuses_a_placeholder_without_its_variable() -> None:
    broken = copy.deepcopy(template())
    del broken["variables"]["properties"]["out_claim"]
    with pytest.raises(ValueError, match="out_claim"):
        work_pool(broken)


def _dockerfile() -> str:
    return DOCKERFILE.read_text()


def test_the_image_installs_this_version_s_wheel_on_a_supported_python() -> None:
    text = _dockerfile()
    base = re.search(r"^FROM python:(\d+\.\d+)-", text, re.MULTILINE)
    assert base is not None, "the image is not built on an official python image"
    assert base.group(1) in SpecifierSet(PROJECT["requires-python"]), base.group(1)
    wheels = set(re.findall(r"capserve-([^-\s]+)-py3-none-any\.whl", text))
    assert wheels == {PROJECT["version"]}, wheels
    assert "[kubernetes-worker]" in text
    pins = {Requirement(line).name: str(Requirement(line).specifier)
            for line in PROJECT["optional-dependencies"]["kubernetes-worker"]}
    assert pins == {"prefect-kubernetes": "==0.8.0"}, pins


def test_every_deployment_runs_from_the_installed_package_on_the_image_s_pool() -> None:
    """Module-path entrypoints: the image's installed capserve is all a run needs (no checkout, no link)."""
    deployments = yaml.safe_load((ROOT / "capserve" / "deployments" / "prefect.yaml").read_text())["deployments"]
    entrypoints = [d["entrypoint"] for d in deployments]
    assert entrypoints and all(e.startswith("capserve.flows.") and ":" not in e for e in entrypoints), entrypoints
    modules = {e.rpartition(".")[0] for e in entrypoints}
    assert all((ROOT / f"{m.replace('.', '/')}.py").is_file() for m in modules), modules
    assert "COPY deployments" not in _dockerfile()  # the deployments come with the wheel
    pool = re.search(r'CMD \["prefect", "worker", "start", "--pool", "([^"]+)"\]', _dockerfile())
    assert pool is not None and {d["work_pool"]["name"] for d in deployments} == {pool.group(1)}
