"""Capacity (pure): offers, ranking, request builders, reservation states, approval, the acquire result."""

from capserve.core.capacity.adoption import adoption_problems, lease_from_reservation
from capserve.core.capacity.approval import ApprovalDecision, ApprovalRequest, needs_approval
from capserve.core.capacity.offers import Offer, offer_from_capacity_block, offers_from_training_plan
from capserve.core.capacity.ranking import ConsideredOffer, Ranking, rank_offers
from capserve.core.capacity.requests import training_plan_name
from capserve.core.capacity.result import AcquireResult
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.capacity.states import Reservation, ReservationState
from capserve.core.tags import CAMPAIGN_TAG

__all__ = [
    "CAMPAIGN_TAG",
    "AcquireResult",
    "ApprovalDecision",
    "ApprovalRequest",
    "CapacitySettings",
    "ConsideredOffer",
    "Offer",
    "Ranking",
    "Reservation",
    "ReservationState",
    "adoption_problems",
    "lease_from_reservation",
    "needs_approval",
    "offer_from_capacity_block",
    "offers_from_training_plan",
    "rank_offers",
    "training_plan_name",
]
