"""Measured vLLM starts of a server shape in S3 (``capserve.core.rollout.start_history``): read before a rollout
renders its startup budget, written once vLLM's log has told how long the start took."""

from __future__ import annotations

from botocore.exceptions import ClientError
from prefect.cache_policies import NO_CACHE
from pydantic import ValidationError

from capserve.core.rollout.start_history import StartHistory
from capserve.tasks import aws
from capserve.tasks.resilience import s3_task


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@s3_task(name="read-start-history", cache_policy=NO_CACHE)
def read_start_history(uri: str, region: str) -> StartHistory:
    """The measured starts kept at ``uri``; none when nothing is kept there yet or what is kept is unreadable
    (a prediction falls back to the time model, it never stops a rollout)."""
    bucket, key = _split(uri)
    try:
        body = aws.client("s3", region).get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return StartHistory()
        raise aws.convert(exc, f"reading the measured starts at {uri}") from exc
    try:
        return StartHistory.model_validate_json(body)
    except ValidationError:
        return StartHistory()


@s3_task(name="write-start-history", cache_policy=NO_CACHE)
def write_start_history(uri: str, region: str, history: StartHistory) -> None:
    """Keep ``history`` at ``uri`` (one small JSON object; the latest write wins)."""
    bucket, key = _split(uri)
    try:
        aws.client("s3", region).put_object(
            Bucket=bucket, Key=key, Body=history.model_dump_json(indent=1).encode(), ContentType="application/json"
        )
    except ClientError as exc:
        raise aws.convert(exc, f"keeping the measured starts at {uri}") from exc
