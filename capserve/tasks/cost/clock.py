"""AWS's clock, as AWS reports it: the ``Date`` header of an answer, compared with this host's clock.

The cost ledger compares the stages' times (taken on this host) with the reservation's window (AWS's
times). On AWS the two clocks agree within a second or two; a host whose clock drifted, or the sandbox,
whose reservation starts at once by moving its own clock to the block's start, answers with a different
``Date``. STS GetCallerIdentity is the call: any valid credentials may make it, no permission is needed
(AWS STS API reference, GetCallerIdentity).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from capserve.tasks import aws


def aws_clock_offset(region: str, *, client: Any = None, now: datetime | None = None) -> timedelta:
    """AWS's time minus this host's, to the second. Raises ``RetryableError``/``PermanentError`` (converted)."""
    sts = client or aws.client("sts", region, max_attempts=2)
    try:
        answer = sts.get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, "reading AWS's clock (STS GetCallerIdentity)") from exc
    received = now or datetime.now(UTC)
    header = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not header:
        return timedelta(0)
    return parsedate_to_datetime(header).astimezone(UTC) - received.replace(microsecond=0)
