"""``capserve down`` tells the truth: where to look, when to refuse, and what every run keeps.

A teardown that looked in the wrong region finds nothing and would report everything "already gone"
while the cluster runs on. So (docs/operations.md §2):

- the region comes from the campaign record (the lease's region); a ``--region`` that disagrees with it
  is refused, and so is a campaign with neither a record nor a ``--region``;
- when nothing of the campaign is found where it looked (no record, no tagged resource, no reservation),
  that is an error naming where it looked, not an all-clear;
- every run lists what it keeps: the reservation (it cannot be cancelled), the weights and records
  buckets, the record, the local files of the host that ran the campaign and the Prefect objects.

Pure: decisions and lists as data; ``capserve.cli.down`` does the looking.
"""

from __future__ import annotations

from capserve.core.errors import SpecError
from capserve.core.teardown.plan import label
from capserve.core.teardown.result import KeptResource

RESERVATION_KEPT = (
    "a reservation cannot be cancelled or deleted: AWS ends it at its end date (instances are terminated "
    "30 minutes before)"
)


def down_region(campaign_id: str, *, recorded: str | None, flag: str | None, record_uri: str) -> str:
    """The region to tear down in: the record's, checked against ``--region``; SpecError when they disagree
    or when neither is known."""
    if recorded is not None and flag is not None and recorded != flag:
        raise SpecError(
            f"--region {flag}: the record of campaign {campaign_id} ({record_uri}) says its resources are in "
            f"{recorded}; drop --region (the record's region is used) or check the campaign name"
        )
    region = recorded or flag
    if region is None:
        raise SpecError(
            f"no lease recorded for campaign {campaign_id!r} in {record_uri}: pass --region to say where its "
            "resources are"
        )
    return region


def nothing_found_message(campaign_id: str, region: str, record_uri: str) -> str:
    return (
        f"nothing of campaign {campaign_id} was found: no record at {record_uri}, no resource tagged "
        f"capserve.io/campaign={campaign_id} and no reservation in {region}. Check the campaign name (the spec's "
        "name) and the region; nothing was deleted"
    )


def kept_on_every_run(
    campaign_id: str,
    *,
    reservation_ids: list[str],
    weights_bucket: str,
    record_uri: str,
    purchase_limit: str,
) -> list[KeptResource]:
    """What ``capserve down`` never deletes, listed on every run (also when it was already torn down)."""
    unique = dict.fromkeys(reservation_ids)
    kept = [KeptResource(resource=label("reservation", r), why=RESERVATION_KEPT) for r in unique]
    kept += [
        KeptResource(
            resource=label("s3-bucket", weights_bucket),
            why="verified checkpoints, shared across campaigns: `aws s3 rm` them when no campaign needs them",
        ),
        KeptResource(
            resource=f"campaign-record/{record_uri}",
            why="the campaign's record (stages, lease, approvals, what was kept): what status and re-runs read",
        ),
        KeptResource(
            resource=f"local-files/out/{campaign_id}",
            why="reports, and the downloaded checkpoint under staging/, on the host that ran `capserve up` (or "
            "its --out folder): delete them by hand",
        ),
        KeptResource(
            resource=f"prefect/concurrency-limit/{purchase_limit}",
            why="the purchase slot of the campaign (one at a time): harmless; `prefect gcl delete` removes it",
        ),
        KeptResource(
            resource=f"prefect/variables/capserve-slot-*-{campaign_id}",
            why="notes naming who holds each of the campaign's slots; a killed run's stays until the next holder "
            "replaces it: harmless; `prefect variable unset` removes them",
        ),
        KeptResource(
            resource=f"prefect/flow-runs/campaign-{campaign_id}",
            why="flow runs, their artifacts and the scheduled teardown run stay in Prefect's history",
        ),
    ]
    return kept


def eks_leftovers_kept(labels: list[str]) -> list[KeptResource]:
    """What EKS or the cluster's controllers made without the campaign tag, still there after teardown."""
    return [
        KeptResource(
            resource=text.split(": ", 1)[0],
            why=f"STILL THERE, made by EKS/Kubernetes ({text.split(': ', 1)[-1]}): not tagged with the campaign; "
            "delete it (it may bill) once the cluster is gone",
        )
        for text in labels
    ]
