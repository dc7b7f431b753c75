"""The committed snapshot of `vllm serve`'s flags (capserve/core/vllm) is the real parser's, and parses as vLLM
parses; the sandbox kubelet runs pods with it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from capserve_sandbox.kube import fake_kube
from capserve_sandbox.vllm_cpu import VllmCpuSettings, unavailable_reason
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.vllm.parser import VllmArgsError, parse_serve_args, serve_argv, snapshot
from capserve.core.vllm.rules import rules
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import condition, get, until
from tests.sandbox.test_kubelet import http_get

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm (scripts/install-vllm-cpu.sh; CI installs it)")
def test_the_snapshot_is_what_the_real_parser_says_now() -> None:
    fresh = subprocess.run(
        [str(VLLM_PYTHON), str(ROOT / "scripts" / "snapshot_vllm_flags.py"), "--stdout"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    now = json.loads(fresh)  # the snapshot of the installed version: a new version needs its own committed
    assert now == snapshot(now["vllm_version"]), (
        "vLLM's flags changed: run `.venv-vllm/bin/python scripts/snapshot_vllm_flags.py` and commit the snapshot"
    )


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm (scripts/install-vllm-cpu.sh; CI installs it)")
def test_the_rules_snapshot_is_what_vllms_own_checks_say_now() -> None:
    fresh = subprocess.run(
        [str(VLLM_PYTHON), str(ROOT / "scripts" / "snapshot_vllm_rules.py"), "--stdout"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    now = json.loads(fresh)
    assert now == rules(now["vllm_version"]), (
        "vLLM's cross-flag rules changed: run `.venv-vllm/bin/python scripts/snapshot_vllm_rules.py` and commit it"
    )


def test_arguments_parse_with_vllms_rewriting() -> None:
    parsed = parse_serve_args(
        [
            "--model",
            "/w/k3",
            "--max_model_len",
            "128k",
            "-tp",
            "8",
            "--enable-expert-parallel",
            "--compilation-config.mode",
            "3",
            "--served-model-name",
            "kimi-k3",
            "--api-key",
            "k",
        ]
    )
    assert parsed.model == "/w/k3" and parsed.served_model_names == ["kimi-k3"] and parsed.api_keys == ["k"]
    assert parsed.get("max_model_len") == 128_000 and parsed.get("tensor_parallel_size") == 8
    assert parsed.get("compilation_config") == {"mode": 3} and parsed.get("enable_expert_parallel") is True
    assert parsed.port == 8000 and not parsed.headless


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["/w", "--bogus", "1"], 2, "vllm: error: unrecognized arguments: --bogus 1"),
        (["/w", "--port", "eighty"], 2, "argument --port: invalid int value: 'eighty'"),
        (["/w", "--kv-cache-dtype", "fp9"], 2, "argument --kv-cache-dtype: invalid choice: 'fp9'"),
        (["/w", "--compilation-config", '{"nope": 1}'], 2, "nope"),
        (["/w", "--max-model-len", "1.5K"], 2, "Decimals are not allowed with binary suffixes"),
        (["--served-model-name", "x"], 1, "`model` should be provided as the first positional argument"),
        (["/w", "--enable-auto-tool-choice"], 1, "--enable-auto-tool-choice requires --tool-call-parser"),
        (
            ["/w", "--enable-per-request-metrics", "--disable-log-stats"],
            1,
            "ValueError: Error: --enable-per-request-metrics requires engine statistics logging",
        ),
        (["/w", "--reasoning-parser", "kimi_k9"], 1, "reasoning_parser_name='kimi_k9' has not been registered"),
        (["/w", "--nnodes", "2", "--node-rank", "2"], 1, "node_rank 2 must be in [0, 2)"),
        (["/w", "-tp", "3", "--nnodes", "2"], 1, "not divisible by nnodes 2"),
    ],
)
def test_refusals_match_vllms(argv: list[str], code: int, message: str) -> None:
    with pytest.raises(VllmArgsError) as refused:
        parse_serve_args(argv)
    assert refused.value.exit_code == code and message in "\n".join(refused.value.lines)


def test_an_unambiguous_abbreviation_is_its_flag_as_in_vllm() -> None:
    # vLLM 0.32 keeps argparse's allow_abbrev default (measured: `vllm serve /w --api-k x` sets api_key).
    assert parse_serve_args(["/w", "--api-k", "k", "--max-model", "4k"]).api_keys == ["k"]
    with pytest.raises(VllmArgsError) as refused:
        parse_serve_args(["/w", "--api=k"])
    assert refused.value.exit_code == 2 and refused.value.flag == "--api"
    assert "ambiguous option: --api=k could match --api-key, --api-server-count" in refused.value.lines[-1]


def test_the_serve_arguments_are_found_in_the_container_command() -> None:
    assert serve_argv(["vllm", "serve"], ["/w", "-tp", "8"]) == ["/w", "-tp", "8"]
    assert serve_argv([], ["--model", "/w"]) == ["--model", "/w"]  # the image's own entrypoint
    script = ["/bin/sh", "-c", "set -e\nexec vllm serve /w --node-rank ${RANK} --port $PORT"]
    assert serve_argv(script, [], {"RANK": "1", "PORT": "8000"}) == ["/w", "--node-rank", "1", "--port", "8000"]
    assert serve_argv(["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "/w"]) == ["--model", "/w"]
    assert serve_argv(["/bin/sh", "-c", "echo hello"], []) is None  # not a vLLM command


# ----------------------------------------------------------------------------- the real vLLM behind a pod


@pytest.mark.vllm
@pytest.mark.slow
def test_a_pod_serves_through_the_real_vllm_on_the_cpu(tmp_path: Path) -> None:
    settings = VllmCpuSettings()
    reason = unavailable_reason(settings)
    if reason:
        pytest.skip(f"real vLLM not installed: {reason}")
    with fake_kube(serving="vllm", state_dir=tmp_path) as kube:
        api = tasks_kube.api_client(kube.url, None, lambda: SecretStr(kube.token))
        (node,) = kube.provision_nodes("system", 1, instance_type="m7i.4xlarge")
        staged = kube.kubelet.layout.host_path(node, "/mnt/k8s-disks/0/weights/smollm2")
        shutil.copytree(settings.model_dir, staged)
        tasks_kube.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "smol", "namespace": "default"},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.32.0",
                            "command": ["vllm", "serve"],
                            "args": [
                                "/weights/smollm2",
                                "--served-model-name",
                                "smol",
                                "--dtype",
                                "bfloat16",
                                "--max-model-len",
                                "2048",
                                "--enforce-eager",
                            ],
                            "ports": [{"containerPort": 8000}],
                            "startupProbe": {
                                "httpGet": {"path": "/health", "port": 8000},
                                "periodSeconds": 5,
                                "failureThreshold": 120,
                            },
                            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                            "volumeMounts": [{"name": "weights", "mountPath": "/weights"}],
                        }
                    ],
                    "volumes": [{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/weights"}}],
                },
            },
        )
        until(
            kube,
            lambda: (condition(get(kube, "pods", "smol"), "Ready") or {}).get("status") == "True",
            timeout_s=settings.startup_timeout_s,
            what="the real vLLM ready",
        )
        status, body = http_get(api, "smol", "/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "smol"
        assert "smol" in k8s.CoreV1Api(api).read_namespaced_pod_log("smol", "default", container="vllm")
