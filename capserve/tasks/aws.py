"""boto3 clients and the one place where botocore errors become capserve errors.

A fresh session and client per call site (boto3 docs, "Multithreading or multiprocessing with clients":
sessions are not thread safe), so endpoint and credentials come from the environment exactly as botocore
resolves them at that moment, and the sandbox and AWS differ only there. What the sessions share is
botocore's loader of its own data files (service models, endpoint rules): read-only, and loading them is
most of a new session's cost (measured in a campaign's flow-run process: three quarters of its CPU went
to parsing those files again for every client).
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import boto3
import botocore.config
import botocore.loaders
import botocore.session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from capserve.core.errors import CapserveError, PermanentError, RetryableError
from capserve.tasks.settings import process_settings


@cache
def _client_config() -> botocore.config.Config:
    """What every client is made with (``Settings.aws``). botocore's "standard" retry mode retries throttling, 5xx
    and connection errors with exponential backoff and full jitter (botocore docs, "Retries" guide); our task
    retries sit above it."""
    calls = process_settings().aws
    return botocore.config.Config(
        retries={"mode": "standard", "total_max_attempts": calls.max_attempts},
        connect_timeout=calls.connect_timeout_s,
        read_timeout=calls.read_timeout_s,
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


_LOADERS: dict[str | None, botocore.loaders.Loader] = {}
_LOADERS_LOCK = threading.Lock()


def session() -> boto3.session.Session:
    """A new session that reads botocore's data files through the process's one loader (per data path:
    ``AWS_DATA_PATH`` can add models, so sessions with another path get their own)."""
    core = botocore.session.Session()
    data_path = core.get_config_variable("data_path")
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = botocore.loaders.create_loader(data_path)
    core.register_component("data_loader", loader)
    return boto3.session.Session(botocore_session=core)


def client(service: str, region: str | None = None, *, max_attempts: int | None = None) -> Any:
    """A fresh boto3 client. ``max_attempts=1`` turns botocore's own retries off (for calls we must not repeat)."""
    config = _client_config()
    if max_attempts is not None:
        config = config.merge(botocore.config.Config(retries={"mode": "standard", "total_max_attempts": max_attempts}))
    return session().client(service, region_name=region, config=config)  # type: ignore[call-overload]


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
        return RetryableError(text + " (transient)")
    return PermanentError(text + (f". {fix}" if fix else ""))
