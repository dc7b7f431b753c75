"""Reaching the endpoint from the flow: a local port-forward through the Kubernetes API server.

The same on AWS and in the sandbox, and it exposes nothing: a listener on 127.0.0.1 (an ephemeral
port) in the flow's own process; each accepted connection opens one ``pods/portforward`` stream to
the leader pod (``pods/portforward`` over a WebSocket, as ``kubectl port-forward`` does) and bytes are
pumped both ways. The listener closes with the ``with`` block. What goes through it is
authenticated like every other API call (the EKS token) and authorised by the caller's access entry.

What a measurement through it includes: the flow host → API server → kubelet → pod hops and the
WebSocket framing, on top of the server's own latency (the report says so).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import websocket
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import RetryableError
from capserve.core.rollout.settings import RolloutWaitSettings

_log = logging.getLogger(__name__)
_CHUNK = 65536

PORT_FORWARD_NOTE = (
    "Reached through a port-forward: a listener on 127.0.0.1 in the flow process, each connection carried "
    "by the Kubernetes API server to the leader pod (nothing is exposed to any network). Latencies measured "
    "through it include the flow host → API server → node hops and the tunnel's framing on top of the "
    "server's own time."
)


# The port-forward subprotocol (kubelet pkg/kubelet/cri/streaming/portforward/websocket.go): per
# requested port a data channel 0 and an error channel 1; the first frame on each carries only the
# port number (2 bytes, little-endian); every later frame is the channel byte plus payload.
_PROTOCOL = "v4.channel.k8s.io"
_DATA, _ERROR = 0, 1


def _open_stream(api: k8s.ApiClient, namespace: str, pod: str, port: int, timeout_s: float) -> websocket.WebSocket:
    """One WebSocket to ``pods/<pod>/portforward?ports=<port>``, authenticated like every other request.

    Not ``kubernetes.stream.portforward``: its proxy thread uses ``select()``, which fails once the
    process holds more than 1024 file descriptors (a load test does), and it verifies TLS against a CA
    *file* only, while our clients keep the cluster CA in memory (``capserve.tasks.kube.api_client``);
    the protocol is in docs/serving.md §7.2.
    """
    configuration = api.configuration
    token = configuration.get_api_key_with_prefix("authorization")  # refreshes the EKS token when due
    host = str(configuration.host)
    scheme = "wss://" if host.startswith("https://") else "ws://"
    url = scheme + host.split("://", 1)[1] + f"/api/v1/namespaces/{namespace}/pods/{pod}/portforward?ports={port}"
    header = [f"sec-websocket-protocol: {_PROTOCOL}"] + ([f"authorization: {token}"] if token else [])
    if scheme == "wss://":
        context = ssl.create_default_context(cadata=configuration.ca_cert_data or None)
        sslopt: dict[str, Any] = {"context": context}
    else:
        sslopt = {"cert_reqs": ssl.CERT_NONE}
    stream = websocket.WebSocket(sslopt=sslopt, skip_utf8_validation=True)
    stream.connect(url, header=header, timeout=timeout_s)  # type: ignore[no-untyped-call]
    stream.settimeout(None)
    return stream


def _to_client(stream: websocket.WebSocket, conn: socket.socket, where: str) -> None:
    """Frames from the pod to the local connection, until either side closes."""
    first = {_DATA: True, _ERROR: True}
    try:
        while True:
            opcode, frame = stream.recv_data_frame(True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return
            if opcode != websocket.ABNF.OPCODE_BINARY or not frame.data:
                continue
            channel, payload = frame.data[0], frame.data[1:]
            if first.get(channel):
                first[channel] = False  # the port number
                continue
            if channel == _DATA:
                conn.sendall(payload)
            elif channel == _ERROR and payload:
                _log.warning("port-forward to %s: %s", where, payload.decode("utf-8", "replace"))
                return
    except (OSError, websocket.WebSocketException):
        return
    finally:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)


class PortForward:
    """A local listener whose every connection is forwarded to ``pod:port`` through the API server."""

    def __init__(self, api: k8s.ApiClient, namespace: str, pod: str, port: int, kube: KubeSettings) -> None:
        self.api, self.namespace, self.pod, self.port = api, namespace, pod, port
        self.connect_timeout_s = kube.request_timeout_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"port-forward {pod}:{port}", daemon=True)
        self.connections = 0

    @property
    def url(self) -> str:
        host, port = self._server.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> PortForward:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (close alone does not)
        with contextlib.suppress(OSError):
            self._server.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        """One local connection: pump it to the pod and back; close both ends when either is done."""
        where = f"{self.namespace}/{self.pod}:{self.port}"
        stream: websocket.WebSocket | None = None
        try:
            stream = _open_stream(self.api, self.namespace, self.pod, self.port, self.connect_timeout_s)
            back = threading.Thread(target=_to_client, args=(stream, conn, where), daemon=True)
            back.start()
            while chunk := conn.recv(_CHUNK):
                stream.send_binary(bytes((_DATA,)) + chunk)
            back.join(timeout=300)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the local client went away mid-stream (a load client closing its connections): normal
        except (OSError, websocket.WebSocketException) as exc:  # one failed connection must not stop the listener
            _log.warning("port-forward to %s failed: %s: %s", where, type(exc).__name__, exc)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()


@contextlib.contextmanager
def port_forward(
    api: k8s.ApiClient, namespace: str, pod: str, port: int, kube: KubeSettings | None = None
) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` forwarding to the pod while the block runs."""
    try:
        forward = PortForward(api, namespace, pod, port, kube or KubeSettings()).start()
    except OSError as exc:
        raise RetryableError(f"could not open a local listener for the port-forward to {pod}: {exc}") from exc
    try:
        yield forward.url
    finally:
        forward.close()


def check_endpoint(url: str, key: SecretStr, model: str, settings: RolloutWaitSettings | None = None) -> str | None:
    """The rollout's own check before traffic moves: ``/v1/models`` with the key lists ``model``.

    Returns None when it does, else what went wrong (the key never appears in it). A connection that drops
    before an answer is tried again (``RolloutWaitSettings.endpoint_check_attempts``): one dropped stream through
    the API server says nothing about the pod (the fault matrix saw one right after a killed run's client went
    away, docs/faults.md).
    """
    settings = settings or RolloutWaitSettings()
    attempts = settings.endpoint_check_attempts
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"}
    for attempt in range(1, attempts + 1):
        try:
            response = httpx.get(f"{url}/v1/models", headers=headers, timeout=settings.endpoint_check_timeout_s)
            break
        except httpx.TransportError as exc:
            if attempt == attempts:
                return f"GET /v1/models through the port-forward failed {attempts} times: {type(exc).__name__}"
            _log.info("GET /v1/models through the port-forward failed (%s): trying again", type(exc).__name__)
            time.sleep(settings.endpoint_check_retry_s)
        except httpx.HTTPError as exc:
            return f"GET /v1/models through the port-forward failed: {type(exc).__name__}"
    if response.status_code != 200:
        return f"GET /v1/models answered {response.status_code} with the campaign's API key"
    try:
        served = [str(item.get("id")) for item in response.json().get("data") or []]
    except (ValueError, AttributeError):
        return "GET /v1/models did not answer JSON"
    if model not in served:
        return f"GET /v1/models lists {served}, not {model!r}"
    return None


@contextlib.contextmanager
def key_in_environment(name: str, key: SecretStr) -> Iterator[str]:
    """The key in this process's environment under ``name`` while the block runs (how the evaluation,
    which reads its key from a named variable, gets it without the key becoming a flow parameter)."""
    previous = os.environ.get(name)
    os.environ[name] = key.get_secret_value()
    try:
        yield name
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous
