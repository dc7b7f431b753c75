"""boto3 clients and the one place where botocore errors become capserve errors.

A client per call site (clients are cheap and not shared across threads: boto3 docs, "Multithreading
or multiprocessing with clients" says sessions are not thread safe). Endpoint and credentials come
from the environment exactly as botocore resolves them, so the sandbox and AWS differ only there.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from capserve.core.errors import CapserveError, PermanentError, RetryableError

# botocore's "standard" retry mode retries throttling, 5xx and connection errors with exponential
# backoff and full jitter (botocore docs, "Retries" guide). Our own retries sit above it only for
# waits; purchases are never retried blindly (see tasks/capacity).
_RETRY_CONFIG = botocore.config.Config(
    retries={"mode": "standard", "total_max_attempts": 5}, connect_timeout=10, read_timeout=60
)

# Error codes that mean "try again later". Everything else from AWS is permanent for our purposes.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def client(service: str, region: str | None = None, *, max_attempts: int | None = None) -> Any:
    """A fresh boto3 client. ``max_attempts=1`` turns botocore's own retries off (for calls we must not repeat)."""
    config = _RETRY_CONFIG
    if max_attempts is not None:
        config = config.merge(botocore.config.Config(retries={"mode": "standard", "total_max_attempts": max_attempts}))
    return boto3.session.Session().client(service, region_name=region, config=config)  # type: ignore[call-overload]


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, RetryableError):
        return True
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return error_code(exc) in THROTTLING_CODES or status >= 500
    return isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError))


def convert(exc: BaseException, what: str, *, fix: str | None = None) -> CapserveError:
    """Turn an SDK error into ours. ``what`` names the resource/action, ``fix`` says what to change.

    Use as ``raise convert(exc, "purchase of offering cb-…") from exc``. The AWS message is kept
    (it never contains credentials); request ids are dropped as noise.
    """
    if isinstance(exc, CapserveError):
        return exc
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        text = f"{what}: AWS said {code}: {message}"
    elif isinstance(exc, BotoCoreError):
        text = f"{what}: {type(exc).__name__}: {exc}"
    else:
        text = f"{what}: {type(exc).__name__}: {exc}"
    if is_retryable(exc):
        return RetryableError(text + " (transient; will be retried)")
    return PermanentError(text + (f". {fix}" if fix else ""))
