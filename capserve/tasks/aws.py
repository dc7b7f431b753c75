"""boto3 clients and the one place where botocore errors become capserve errors.

A client per service, region, retry limit and ``AWS_*`` environment, made once per process and shared: boto3's
clients are thread safe and its sessions are not (boto3 docs, "Multithreading or multiprocessing with
clients"), so each client is made from a session of its own and the session is not kept. Because the key holds
every ``AWS_*`` variable, endpoint and credentials still come from the environment as botocore resolves them
when they change (the sandbox starting, another endpoint), and the sandbox and AWS differ only there; the
process id in the key keeps a forked child off its parent's connections. Making a client is not free (its
endpoint rules and service model; a campaign's flow-run process made hundreds, about an eighth of its CPU).
What every session shares is botocore's loader of its own data files (service models, endpoint rules):
read-only, and loading them is most of a new session's cost (measured in a campaign's flow-run process: three
quarters of its CPU went to parsing those files again for every client).

A caller that changes a client (registers an event handler on it) asks ``new_client``: a cached one is shared.
"""

from __future__ import annotations

import hashlib
import os
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


def new_client(service: str, region: str | None = None, *, max_attempts: int | None = None) -> Any:
    """A boto3 client of its own. ``max_attempts=1`` turns botocore's own retries off (for calls we must not repeat)."""
    config = _client_config()
    if max_attempts is not None:
        config = config.merge(botocore.config.Config(retries={"mode": "standard", "total_max_attempts": max_attempts}))
    return session().client(service, region_name=region, config=config)  # type: ignore[call-overload]


_CLIENTS: dict[tuple[object, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _environment_digest() -> str:
    """What the environment says of AWS (endpoints, credentials, region, profile), as a digest: the cache's key
    holds no secret."""
    said = "\0".join(f"{name}={value}" for name, value in sorted(os.environ.items()) if name.startswith("AWS_"))
    return hashlib.sha256(said.encode()).hexdigest()


def client(service: str, region: str | None = None, *, max_attempts: int | None = None) -> Any:
    """The process's boto3 client for this service, region, retry limit and AWS environment (made on first use).
    ``max_attempts=1`` turns botocore's own retries off (for calls we must not repeat)."""
    key = (os.getpid(), service, region, max_attempts, _environment_digest())
    with _CLIENTS_LOCK:
        made = _CLIENTS.get(key)
    if made is None:
        made = new_client(service, region, max_attempts=max_attempts)  # outside the lock: it takes milliseconds
        with _CLIENTS_LOCK:
            made = _CLIENTS.setdefault(key, made)
    return made


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
