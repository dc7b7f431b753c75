"""Looking at a campaign, read-only: its record (S3), its Prefect runs, what carries its tag in AWS, and the
nodes and labelled workloads of its cluster. Nothing here creates, changes or deletes anything.

Called from the CLI, outside any flow: the task functions it reuses are called through ``.fn`` (no task
run, so no Prefect server is started just to look). Each place that cannot be asked is reported as such,
with why (``capserve.core.status.Part``), never as "nothing there".
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from capserve.core.errors import CapserveError
from capserve.core.record import CampaignRecord, RecordRef
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.status import (
    CampaignStatus,
    Part,
    ResourceRow,
    RunRow,
    kept_rows,
    lease_line,
    resource_row,
    stage_rows,
)
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.inventory import Inventory
from capserve.core.teardown.plan import plan_teardown
from capserve.tasks.aws import client, error_code
from capserve.tasks.capacity.reservations import find_campaign_reservations
from capserve.tasks.kube import convert as kube_convert
from capserve.tasks.record_store import read_record
from capserve.tasks.teardown import workloads as kube
from capserve.tasks.teardown.inventory import inventory_campaign

BUCKET_ABSENT_CODES = frozenset({"404", "NoSuchBucket", "NotFound"})


def read_campaign_record(ref: RecordRef) -> CampaignRecord | None:
    stored = read_record(ref)
    return stored.record if stored else None


def campaign_status(spec: CampaignSpec, ref: RecordRef, record: CampaignRecord | None, settings: Settings,
                    *, regions: list[str]) -> CampaignStatus:
    """Everything ``capserve status`` shows. ``regions``: where to look for the campaign's resources."""
    aws, inventories = aws_part(spec, regions, settings)
    return CampaignStatus(
        campaign_id=spec.campaign_id,
        record_uri=ref.uri,
        record_found=record is not None,
        region=record.lease.region if record is not None and record.lease is not None else None,
        lease=lease_line(record),
        stages=stage_rows(record),
        kept=kept_rows(record),
        prefect=prefect_part(spec.campaign_id),
        aws=aws,
        kubernetes=kubernetes_part(inventories),
    )


def aws_part(spec: CampaignSpec, regions: list[str], settings: Settings) -> tuple[Part, list[Inventory]]:
    """Reservations, buckets and everything teardown would delete, in ``regions``."""
    rows: list[ResourceRow] = []
    inventories: list[Inventory] = []
    try:
        for reservation in find_campaign_reservations.fn(spec.capacity, spec.campaign_id):
            rows.append(ResourceRow(
                kind="reservation", name=reservation.reservation_id, where=reservation.availability_zone,
                state=f"{reservation.state.value} until {reservation.end.isoformat()} (cannot be cancelled)",
            ))
        if bucket_exists(spec.weights.s3_bucket, spec.weights_region):
            rows.append(ResourceRow(kind="s3-bucket", name=spec.weights.s3_bucket, where=spec.weights_region,
                                    state="weights (shared across campaigns: kept)"))
        for region in regions:
            found = inventory_campaign.fn(
                spec.campaign_id, region, kind=None, existing_cluster=spec.cluster.existing_cluster_name,
                settings=settings.teardown,
            )
            inventories.append(found)
            rows += [resource_row(label, region) for label in plan_teardown(found, settings.teardown).resources()]
    except CapserveError as exc:
        return Part(looked=False, why=f"AWS could not be asked: {exc}", rows=tuple(rows)), inventories
    return Part(looked=True, why=f"by the tag {CAMPAIGN_TAG}={spec.campaign_id} in {', '.join(regions)}",
                rows=tuple(rows)), inventories


def bucket_exists(bucket: str, region: str) -> bool:
    try:
        client("s3", region).head_bucket(Bucket=bucket)
    except ClientError as exc:
        if error_code(exc) in BUCKET_ABSENT_CODES:
            return False
        raise CapserveError(f"checking bucket {bucket} in {region}: {error_code(exc)}") from exc
    return True


def kubernetes_part(inventories: list[Inventory]) -> Part:
    """The nodes and the campaign-labelled workloads of the campaign's cluster (when it is ACTIVE)."""
    clusters = [(i.workload_cluster, i.region) for i in inventories if i.workload_cluster is not None]
    if not clusters:
        return Part(looked=False, why="no cluster of the campaign exists: nothing to ask")
    cluster, region = clusters[0]
    if cluster.status != "ACTIVE" or cluster.endpoint is None:
        return Part(looked=False, why=f"cluster {cluster.name} is {cluster.status}: its API cannot be asked yet")
    try:
        dyn = kube.connect(cluster, region)
        try:
            nodes: Any = dyn.resources.get(api_version="v1", kind="Node").get()
        except Exception as exc:
            raise kube_convert(exc, f"listing the nodes of cluster {cluster.name}") from exc
        rows = [_node_row(node) for node in nodes.to_dict().get("items", [])]
        rows += [
            ResourceRow(kind=w.kind, name=w.name, where=w.namespace or "", state="labelled with the campaign")
            for w in kube.list_workloads(dyn, inventories[0].campaign_id)
        ]
    except CapserveError as exc:
        return Part(looked=False, why=f"cluster {cluster.name} could not be asked: {exc}")
    return Part(looked=True, why=f"cluster {cluster.name} ({region})", rows=tuple(rows))


def _node_row(node: dict[str, Any]) -> ResourceRow:
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    gpus = ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")
    instance = labels.get("node.kubernetes.io/instance-type", "")
    state = f"Ready={ready}" + (f", {instance}" if instance else "") + (f", {gpus} GPUs" if gpus else "")
    return ResourceRow(kind="node", name=metadata.get("name", "?"), where=labels.get("pool", ""), state=state)


def prefect_part(campaign_id: str) -> Part:
    """The campaign's flow runs (named ``campaign-<id>``, or tagged with the campaign), newest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, FlowRunFilterTags
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if not url:
        return Part(
            looked=False,
            why="no Prefect server configured (PREFECT_API_URL is not set): runs made on a temporary server "
            "are not asked for",
        )
    tag = f"{CAMPAIGN_TAG}={campaign_id}"
    try:
        with get_client(sync_client=True) as prefect:
            named = prefect.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=f"campaign-{campaign_id}")),
                sort=FlowRunSort.START_TIME_DESC, limit=50,
            )
            tagged = prefect.read_flow_runs(
                flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])),
                sort=FlowRunSort.START_TIME_DESC, limit=50,
            )
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server is reported as such, never as "no runs"
        return Part(looked=False, why=f"Prefect at {url} did not answer ({type(exc).__name__}: {exc})"[:2000])
    # The campaign's own runs; their stage subflows carry the tag too, but each is part of a run listed here.
    runs = {
        r.id: r for r in [*named, *tagged]
        if (r.name == f"campaign-{campaign_id}" or tag in (r.tags or [])) and r.parent_task_run_id is None
    }
    rows = [
        RunRow(name=r.name, state=r.state_name or "?", start=r.start_time or r.expected_start_time)
        for r in sorted(runs.values(), key=lambda r: str(r.start_time or r.expected_start_time), reverse=True)
    ]
    return Part(looked=True, why=f"Prefect at {url}", rows=tuple(rows))
