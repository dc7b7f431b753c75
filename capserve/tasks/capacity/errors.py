"""Capacity-specific error conversion: which AWS answers are worth retrying, and what to change otherwise.

EC2 answers "no capacity" with HTTP 500 (``InsufficientInstanceCapacity``, ``InsufficientCapacity``:
EC2 API reference, "Error codes", server errors), which a generic "5xx is transient" rule would retry
forever; here it is permanent and says what to change in the spec.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from capserve.core.errors import CapserveError, PermanentError
from capserve.tasks.aws import convert, error_code

NO_CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientCapacityException"})
VALIDATION_CODES = frozenset(
    {
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidParameter",
        "MissingParameter",
        "ValidationException",
        "ValidationError",
        "InvalidCapacityBlockOfferingId.NotFound",
        "InvalidCapacityBlockOfferingId.Malformed",
    }
)
PERMISSION_CODES = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure"})

NOT_FOUND_CODES = {
    "ec2": frozenset({"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"}),
    "sagemaker": frozenset({"ResourceNotFound"}),
}

_FIX_NO_CAPACITY = (
    "AWS has no capacity for this request right now: widen capacity.earliest_start/latest_end, add regions to "
    "capacity.regions, lower capacity.instance_count, or choose another capacity.instance_type"
)
_FIX_VALIDATION = (
    "AWS refused the request as invalid: check capacity.instance_type, instance_count, duration_hours and the "
    "window (Capacity Blocks: 1–14 days in whole days, then whole weeks; at most 8 weeks ahead)"
)


def permission_fix(action: str) -> str:
    return f"grant the caller's IAM role {action} (and re-run; nothing was bought)"


def capacity_error(exc: BaseException, what: str, *, iam_action: str) -> CapserveError:
    """Our error for an SDK error raised by a capacity call, with the fix for the codes we know."""
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in NO_CAPACITY_CODES:
            return PermanentError(f"{what}: AWS said {code}. {_FIX_NO_CAPACITY}")
        if code in VALIDATION_CODES:
            return convert(exc, what, fix=_FIX_VALIDATION) if _is_client_side(exc) else convert(exc, what)
        if code in PERMISSION_CODES:
            return PermanentError(f"{what}: AWS said {code}. {permission_fix(iam_action)}")
    return convert(exc, what)


def _is_client_side(exc: ClientError) -> bool:
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) or 400)
    return status < 500


def is_not_found(exc: BaseException, service: str) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) in NOT_FOUND_CODES[service]
