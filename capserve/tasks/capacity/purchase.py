"""Buying: a DryRun permission preflight, then exactly one purchase, tagged with the campaign.

``PurchaseCapacityBlock`` has no idempotency token and a Capacity Block cannot be cancelled (EC2 API
reference; EC2 user guide, capacity-blocks-purchase.html), so the purchase call is sent once with
botocore's retries off. An answer that leaves the outcome unknown (5xx, connection lost) is never
retried blindly: the next run looks the reservation up by its tag first.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from capserve.core.capacity.offers import Offer
from capserve.core.capacity.requests import (
    create_training_plan_request,
    purchase_capacity_block_request,
    training_plan_name,
)
from capserve.core.capacity.states import Reservation, reservation_from_ec2
from capserve.core.errors import OfferGoneError, PermanentError
from capserve.tasks.aws import client, error_code, is_retryable
from capserve.tasks.capacity.errors import capacity_error
from capserve.tasks.capacity.reservations import training_plan
from capserve.tasks.resilience import aws_task, single_shot_task

PURCHASE_ACTION = "ec2:PurchaseCapacityBlock (and ec2:CreateTags for TagSpecifications)"
CREATE_PLAN_ACTION = "sagemaker:CreateTrainingPlan (and sagemaker:AddTags)"


class PurchaseOutcomeUnknownError(PermanentError):
    """The purchase may or may not have happened. Never retried: the next run adopts by tag or buys."""


# A DryRun buys nothing, so it may be retried like any control-plane read.
@aws_task(name="preflight-purchase")
def preflight_purchase(offer: Offer, campaign_id: str) -> None:
    """Ask AWS whether the purchase would be allowed, without buying (DryRun → DryRunOperation).

    Training plans have no DryRun; their permission problems surface at create time, before anything is bought.
    """
    if offer.provider != "ec2-capacity-block":
        return
    ec2 = client("ec2", offer.region)
    try:
        ec2.purchase_capacity_block(**purchase_capacity_block_request(offer, campaign_id, dry_run=True))
    except ClientError as exc:
        if error_code(exc) == "DryRunOperation":
            return
        _raise_if_gone(exc, offer)
        raise capacity_error(exc, f"permission check (DryRun) for offering {offer.offering_id}",
                             iam_action=PURCHASE_ACTION) from exc
    raise PermanentError(
        f"permission check (DryRun) for offering {offer.offering_id}: AWS answered without DryRunOperation; "
        "refusing to buy against an endpoint that ignores DryRun"
    )


def send_purchase(offer: Offer, campaign_id: str) -> dict[str, Any]:
    """The one PurchaseCapacityBlock request, botocore retries off. Its answer is recorded by the caller."""
    ec2 = client("ec2", offer.region, max_attempts=1)
    response: dict[str, Any] = ec2.purchase_capacity_block(**purchase_capacity_block_request(offer, campaign_id))
    return response


def send_create_training_plan(offer: Offer, campaign_id: str) -> str:
    sagemaker = client("sagemaker", offer.region, max_attempts=1)
    return str(sagemaker.create_training_plan(**create_training_plan_request(offer, campaign_id))["TrainingPlanArn"])


# EC2's answer for an offering id it no longer has (bought by someone else, or past its start): a 4xx, so nothing
# was bought (EC2 API reference, PurchaseCapacityBlock; "Error codes").
OFFER_GONE_CODE = "InvalidCapacityBlockOfferingId.NotFound"


def _raise_if_gone(exc: ClientError, offer: Offer) -> None:
    if error_code(exc) == OFFER_GONE_CODE:
        raise OfferGoneError(
            f"offering {offer.offering_id} ({offer.label()}) is no longer offered (AWS said {OFFER_GONE_CODE}): "
            "another buyer took it or it was withdrawn; nothing was bought"
        ) from exc


def _unknown(exc: BaseException, what: str) -> PurchaseOutcomeUnknownError:
    return PurchaseOutcomeUnknownError(
        f"{what}: {type(exc).__name__}: {exc}. The purchase may have gone through; nothing was retried. "
        "Re-run the flow: it looks for a reservation tagged with this campaign before buying anything"
    )


@single_shot_task(
    name="purchase-capacity",
    why="PurchaseCapacityBlock has no idempotency token and a Capacity Block cannot be cancelled: a retry "
    "could buy twice. An unknown outcome is an error; the next run adopts the reservation by its tag.",
)
def purchase(offer: Offer, campaign_id: str) -> Reservation:
    """Buy ``offer`` once. Returns the new reservation (payment-pending at first)."""
    what = f"purchase of {offer.provider} offering {offer.offering_id} in {offer.region}"
    if offer.provider == "sagemaker-training-plan":
        return _create_training_plan(offer, campaign_id, what)
    try:
        response = send_purchase(offer, campaign_id)
    except ClientError as exc:
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status >= 500 and error_code(exc) not in {"InsufficientInstanceCapacity", "InsufficientCapacity"}:
            raise _unknown(exc, what) from exc
        _raise_if_gone(exc, offer)
        raise capacity_error(exc, what, iam_action=PURCHASE_ACTION) from exc
    except Exception as exc:
        if is_retryable(exc):  # connection reset / read timeout: the request may have been served
            raise _unknown(exc, what) from exc
        raise capacity_error(exc, what, iam_action=PURCHASE_ACTION) from exc
    return reservation_from_ec2(offer.region, response["CapacityReservation"])


def _create_training_plan(offer: Offer, campaign_id: str, what: str) -> Reservation:
    try:
        send_create_training_plan(offer, campaign_id)
    except ClientError as exc:
        # The plan name is derived from the campaign id, so "already exists" means a previous run (or a
        # retry whose answer was lost) created it: adopt it if it is ours, refuse if it is not.
        if error_code(exc) != "ResourceInUse":
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if status >= 500:
                raise _unknown(exc, what) from exc
            raise capacity_error(exc, what, iam_action=CREATE_PLAN_ACTION) from exc
    except Exception as exc:
        if is_retryable(exc):
            raise _unknown(exc, what) from exc
        raise capacity_error(exc, what, iam_action=CREATE_PLAN_ACTION) from exc
    plan = training_plan(offer.region, training_plan_name(campaign_id))
    if plan is None:
        raise PermanentError(f"{what}: AWS accepted the plan but does not describe it yet; re-run to adopt it")
    if plan.campaign_id != campaign_id:
        raise PermanentError(
            f"{what}: a training plan named {training_plan_name(campaign_id)} exists but is tagged for "
            f"campaign {plan.campaign_id!r}: rename this campaign or delete the other plan's claim"
        )
    return plan
