"""`capserve down`'s decisions (region, refusal, what it keeps) and `capserve status`'s rows, from plain data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capserve.core.down import down_region, eks_leftovers_kept, kept_on_every_run, nothing_found_message
from capserve.core.errors import SpecError
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, StageEntry
from capserve.core.stages import Stage, StageStatus
from capserve.core.status import kept_rows, lease_line, resource_row, stage_rows
from capserve.core.teardown.result import KeptResource

URI = "s3://capserve-records-123456789012-us-east-2/capserve/campaigns/k3-demo/record.json"
T0 = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


def test_the_records_region_is_used_and_a_contradicting_flag_refused() -> None:
    assert down_region("k3-demo", recorded="us-west-2", flag=None, record_uri=URI) == "us-west-2"
    assert down_region("k3-demo", recorded="us-west-2", flag="us-west-2", record_uri=URI) == "us-west-2"
    assert down_region("k3-demo", recorded=None, flag="eu-west-1", record_uri=URI) == "eu-west-1"
    with pytest.raises(SpecError, match="says its resources are in us-west-2; drop --region"):
        down_region("k3-demo", recorded="us-west-2", flag="us-east-2", record_uri=URI)
    with pytest.raises(SpecError, match="no lease recorded for campaign 'k3-demo'.*pass --region"):
        down_region("k3-demo", recorded=None, flag=None, record_uri=URI)


def test_what_every_run_keeps() -> None:
    kept = kept_on_every_run(
        "k3-demo", reservation_ids=["cr-1", "cr-1", "cr-2"], weights_bucket="w", record_uri=URI,
        purchase_limit="capserve-purchase-k3-demo",
    )
    resources = [k.resource for k in kept]
    assert resources == [
        "reservation/cr-1", "reservation/cr-2", "s3-bucket/w", f"campaign-record/{URI}", "local-files/out/k3-demo",
        "prefect/concurrency-limit/capserve-purchase-k3-demo", "prefect/variables/capserve-slot-*-k3-demo",
        "prefect/flow-runs/campaign-k3-demo",
    ]
    assert "cannot be cancelled" in kept[0].why


def test_eks_leftovers_say_they_are_still_there() -> None:
    [kept] = eks_leftovers_kept(["ebs-volume/vol-1: made by the EBS CSI driver (available)"])
    assert kept.resource == "ebs-volume/vol-1"
    assert kept.why.startswith("STILL THERE, made by EKS/Kubernetes (made by the EBS CSI driver (available))")


def test_nothing_found_names_where_it_looked() -> None:
    message = nothing_found_message("k3-demo", "us-east-2", URI)
    assert URI in message and "us-east-2" in message and "nothing was deleted" in message


def test_status_rows_follow_the_campaign_order_and_the_record() -> None:
    record = CampaignRecord.new("k3-demo", T0)
    record = record.with_stage(Stage.BRING_UP, StageEntry(status=StageStatus.FAILED, started_at=T0, ended_at=T0,
                                                          inputs_digest="a" * 64, detail="boom"))
    record = record.with_stage(Stage.PLAN, StageEntry(status=StageStatus.COMPLETED, started_at=T0, ended_at=T0))
    rows = stage_rows(record)
    assert [(r.stage, r.status, r.inputs_digest) for r in rows] == [
        (Stage.PLAN, "completed", ""), (Stage.BRING_UP, "failed", "a" * 64)
    ]
    assert stage_rows(None) == () and lease_line(None) == ""
    lease = Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
                  reservation_id="cr-1", start=T0, end=T0 + timedelta(days=1), instance_type="p6-b300.48xlarge",
                  instance_count=1, upfront_fee=2832.0)
    line = lease_line(record.with_lease(lease, offering_id=None, now=T0))
    assert line.startswith("cr-1 in us-east-2a: 1 × p6-b300.48xlarge") and line.endswith("(bought for $2,832.00)")
    kept = record.with_kept((KeptResource(resource="s3-bucket/w", why="shared"),), now=T0)
    assert [(r.kind, r.name, r.state) for r in kept_rows(kept)] == [("s3-bucket", "w", "kept: shared")]
    assert resource_row("eks-cluster/capserve-k3-demo", "us-east-2").kind == "eks-cluster"
