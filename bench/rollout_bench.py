"""Rollout benchmark (not a test): what the rollout's wait adds on top of the server's own start.

  .venv/bin/python -m bench.rollout_bench [--start-s 3]

In the sandbox's Kubernetes (cluster time at 1×, so seconds are seconds), a vLLM pod whose server
starts listening ``--start-s`` seconds after its container starts (the kubelet's slow-start fault)
is applied and waited for by ``wait_rollout_ready``. Printed:

1. apply-to-ready minus the server's own start time (the overhead: scheduling, the kubelet, the
   readiness probe's period, the watch), and the ratio of apply-to-ready to the start time;
2. the API requests the wait made (a watch: a list and a few watch requests), against the requests
   a 1-second poll loop would have made over the same time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")

from capserve_sandbox.kube import Fault, FaultKind, fake_kube
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.core.rollout.settings import RolloutWaitSettings
from capserve.tasks import kube as tasks_kube
from capserve.tasks.rollout.wait import wait_rollout_ready

MODEL_DIR = "/mnt/k8s-disks/0/weights/model"


def vllm_pod(period_s: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench", "namespace": "default", "labels": {"capserve.io/rollout": "vllm-blue"}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "command": ["vllm", "serve"],
                    "args": [MODEL_DIR, "--served-model-name", "bench"],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "volumeMounts": [{"name": "weights", "mountPath": "/mnt/k8s-disks/0/weights"}],
                    "startupProbe": {
                        "httpGet": {"path": "/health", "port": "http"},
                        "periodSeconds": period_s,
                        "failureThreshold": 600,
                    },
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period_s},
                }
            ],
            "volumes": [{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/weights", "type": "Directory"}}],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-s", type=float, default=3.0, help="the server's own start time")
    parser.add_argument("--probe-period-s", type=int, default=1, help="startup/readiness probe period")
    args = parser.parse_args()
    with fake_kube(time_scale=1.0) as kube:
        api = tasks_kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
        (node,) = kube.provision_nodes("gpu", 1)
        host = kube.kubelet.layout.host_path(node, MODEL_DIR)
        host.mkdir(parents=True, exist_ok=True)
        (host / "config.json").write_text("{}")
        (host / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "m.safetensors"}}))
        (host / "m.safetensors").write_bytes(b"\0" * 16)
        kube.inject(Fault(FaultKind.SLOW_START, pod="bench", seconds=args.start_s))
        applied = time.monotonic()
        tasks_kube.apply(api, vllm_pod(args.probe_period_s))
        ready = wait_rollout_ready.fn(
            api,
            "default",
            "vllm-blue",
            1,
            budget_s=600,
            wait=RolloutWaitSettings(),
            kube=KubeSettings(),
        )
        to_ready = time.monotonic() - applied
        api.close()
    overhead = to_ready - args.start_s
    poll_calls = max(1, round(to_ready / 1.0))
    print(f"server start {args.start_s:.2f} s, apply-to-ready {to_ready:.2f} s")
    print(f"rollout overhead: {overhead:.2f} s (apply-to-ready / server start = {to_ready / args.start_s:.2f}×;")
    print(f"  the probe period is {args.probe_period_s} s, so up to one period of it is the probe's)")
    print(
        f"API requests while waiting: {ready.api_calls} (a watch) vs ~{poll_calls} for a 1 s poll loop "
        f"(ratio {ready.api_calls / poll_calls:.2f})"
    )


if __name__ == "__main__":
    main()
