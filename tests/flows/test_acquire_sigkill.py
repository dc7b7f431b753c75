"""SIGKILL right after the purchase returns, before anything is recorded: the re-run adopts, never buys twice.

The flow runs in a child process against a moto server this test process owns (so the sandbox's record
of calls survives the kill) and against this session's Prefect test server. The child wraps the one
function that sends PurchaseCapacityBlock so that, once AWS has answered, it announces the reservation
and parks; the test then kills it with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK
from prefect.settings import PREFECT_API_URL

from capserve.core.capacity.settings import CapacitySettings
from capserve.core.settings import RecordSettings
from capserve.core.spec import parse_spec
from capserve.flows.acquire import acquire
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import read_record

CHILD = """
import sys, time
from pathlib import Path
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.spec import CampaignSpec
from capserve.flows.acquire import acquire
import capserve.tasks.capacity.purchase as purchase_module

marker = Path(sys.argv[2])
send = purchase_module.send_purchase

def send_then_park(offer, campaign_id):
    response = send(offer, campaign_id)
    marker.write_text(response["CapacityReservation"]["CapacityReservationId"])
    time.sleep(3600)  # killed here: the purchase happened, nothing was recorded

purchase_module.send_purchase = send_then_park
acquire(CampaignSpec.model_validate_json(Path(sys.argv[1]).read_text()),
        settings=CapacitySettings(poll_initial_seconds=0.01, poll_max_seconds=0.05))
"""

# Generous: the child imports Prefect and boto3 and starts a flow run on a loaded 2-core machine.
CHILD_STARTUP_LIMIT_SECONDS = 240


@pytest.fixture
def sandbox() -> Iterator[None]:
    with moto_sandbox("us-east-2"):
        ext.reset()
        CLOCK.reset()
        ext.SETTINGS.auto_activate = True
        yield
        ext.reset()
        CLOCK.reset()


def test_killed_after_purchase_rerun_adopts_and_buys_once(sandbox: None, tmp_path: Path) -> None:
    spec = parse_spec({
        "name": "acq-sigkill",
        "model": {"catalog": "kimi-k3"},
        "capacity": {
            "provider": "ec2-capacity-block", "instance_type": "p6-b300.48xlarge", "regions": ["us-east-2"],
            "earliest_start": "now", "latest_end": "now+14d", "duration_hours": 24,
            "max_upfront_fee_usd": 4000, "approval_threshold_usd": 3500,
        },
        "weights": {"s3_bucket": "acq-sigkill-bucket"},
    })
    spec_file, marker, script = tmp_path / "spec.json", tmp_path / "purchased", tmp_path / "child.py"
    spec_file.write_text(spec.model_dump_json())
    script.write_text(CHILD)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    log = tmp_path / "child.log"  # a file, not a pipe: a full pipe would block the child's logging
    with log.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, str(script), str(spec_file), str(marker)], env=env, stdout=sink, stderr=sink
        )
    try:
        started = time.monotonic()
        while not marker.exists() and child.poll() is None:
            if time.monotonic() - started > CHILD_STARTUP_LIMIT_SECONDS:
                pytest.fail("the child never reached the purchase")
            time.sleep(0.2)
        assert marker.exists(), f"child exited early:\n{log.read_text()[-3000:]}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    bought = marker.read_text()
    assert read_record(record_ref(spec, RecordSettings())) is None  # nothing recorded

    result = acquire(spec, settings=CapacitySettings(poll_initial_seconds=0.01, poll_max_seconds=0.05))

    assert result.outcome == "adopted" and result.lease is not None
    assert result.lease.reservation_id == bought
    assert len(ext.calls("purchase_capacity_block")) == 1
    stored = read_record(record_ref(spec, RecordSettings()))
    assert stored is not None and stored.record.lease == result.lease
