"""An overall deadline for an HTTP call, not only a timeout per socket read.

httpx's timeouts apply to each network operation on its own (https://www.python-httpx.org/advanced/timeouts/:
"the read timeout specifies the maximum duration to wait for a chunk of data to be received"), so an endpoint
that sends one byte every few seconds, headers included, is never timed out: each byte starts the read timeout
again, and an answer whose headers trickle in never even reaches the code that checks the deadline between
chunks. A check that should end at 60 s ran past 300.

The client's connections therefore use a network backend (httpcore's documented extension point,
https://www.encode.io/httpcore/network-backends/) whose every connect, read and write waits at most what is
left until the deadline of the call in progress (``until``): past it, the read fails as a read timeout does.
"""

from __future__ import annotations

import math
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore
import httpx

_END: ContextVar[float] = ContextVar("capserve_http_deadline", default=math.inf)  # time.monotonic() value


@contextmanager
def until(end: float) -> Iterator[None]:
    """Every network operation of this thread's calls inside waits at most until ``end`` (monotonic)."""
    token = _END.set(min(end, _END.get()))
    try:
        yield
    finally:
        _END.reset(token)


def _bounded(timeout: float | None, late: type[Exception]) -> float:
    left = _END.get() - time.monotonic()
    if left <= 0:
        raise late("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: typing.Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, bounded, local_address, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    """httpx's own transport (TLS verification and all), its connections made by the deadline-bounded backend.
    httpx takes no network backend as an argument, so its pool is made again with one, from its own settings."""
    made = httpx.HTTPTransport(limits=limits)
    pool = made._pool
    made._pool = httpcore.ConnectionPool(
        ssl_context=pool._ssl_context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=_Backend(),
    )
    return made
