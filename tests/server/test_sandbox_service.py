"""``capserve sandbox``: the stand-ins as a service another process reaches through the environment it writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from capserve.cli.sandbox import worker_environment

pytestmark = pytest.mark.server


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_the_service_serves_another_process_and_stops_on_sigterm(tmp_path: Path) -> None:
    env_file = tmp_path / "worker.env"
    log = (tmp_path / "sandbox.log").open("wb")
    service = subprocess.Popen(
        [str(Path(sys.executable).parent / "capserve"), "sandbox", "--env-file", str(env_file)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not env_file.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert env_file.exists(), (tmp_path / "sandbox.log").read_text()
        assert env_file.stat().st_mode & 0o077 == 0  # it holds credentials, even dummy ones
        env = read_env(env_file)
        assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        assert env["CAPSERVE_SANDBOX_CONTROL"].startswith("http://127.0.0.1:")  # the fault matrix's holds
        ec2 = boto3.client(
            "ec2", region_name=env["AWS_DEFAULT_REGION"], endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=env["AWS_SESSION_TOKEN"],
        )
        # capserve's moto extension answers in the service's process: Capacity Block offerings exist.
        offerings = ec2.describe_capacity_block_offerings(
            InstanceType="p5.48xlarge", InstanceCount=1, CapacityDurationHours=24
        )["CapacityBlockOfferings"]
        assert offerings
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0
        assert "sandbox stopped" in (tmp_path / "sandbox.log").read_text()
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()
        log.close()


def test_the_worker_environment_names_the_hub_and_keeps_only_what_a_worker_needs() -> None:
    env = worker_environment(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "HOME": "/root", "AWS_REGION": "us-east-2",
         "CAPSERVE_REGISTRY_TOOL": "python -m capserve_sandbox.registry"},
        hub="http://127.0.0.1:2", inference="http://127.0.0.1:3/v1",
    )
    assert env == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "us-east-2",
        "CAPSERVE_REGISTRY_TOOL": "python -m capserve_sandbox.registry",
        "CAPSERVE_HUB_ENDPOINT": "http://127.0.0.1:2", "CAPSERVE_SANDBOX_INFERENCE": "http://127.0.0.1:3/v1",
    }
