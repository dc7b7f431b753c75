"""Reaching the endpoint from the flow: a local port-forward through the Kubernetes API server.

The same on AWS and in the sandbox, and it exposes nothing: a listener on 127.0.0.1 (an ephemeral
port) in the flow's own process; each accepted connection opens one ``pods/portforward`` stream to
the leader pod (``kubernetes.stream.portforward``, as ``kubectl port-forward`` does) and bytes are
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
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from kubernetes import client as k8s
from kubernetes.stream import portforward
from pydantic import SecretStr

from capserve.core.errors import RetryableError

_log = logging.getLogger(__name__)
_CHUNK = 65536

PORT_FORWARD_NOTE = (
    "reached through a port-forward: a listener on 127.0.0.1 in the flow process, each connection carried "
    "by the Kubernetes API server to the leader pod (nothing is exposed to any network). Latencies measured "
    "through it include the flow host → API server → node hops and the tunnel's framing on top of the "
    "server's own time."
)
NLB_NOTE = (
    "an internal Network Load Balancer (Service serving-nlb, scheme internal) was created for clients inside "
    "the VPC; a flow run inside the VPC can use it. This run reached the endpoint through a port-forward "
    "(a listener on 127.0.0.1 carried by the API server to the leader pod), so its latencies include that tunnel."
)


def _pump(source: Any, sink: Any) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class PortForward:
    """A local listener whose every connection is forwarded to ``pod:port`` through the API server."""

    def __init__(self, api: k8s.ApiClient, namespace: str, pod: str, port: int) -> None:
        self.api, self.namespace, self.pod, self.port = api, namespace, pod, port
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
        forward = None
        try:
            core = k8s.CoreV1Api(self.api)
            forward = portforward(
                core.connect_get_namespaced_pod_portforward, self.pod, self.namespace, ports=str(self.port)
            )
            remote = forward.socket(self.port)
            remote.setblocking(True)
            back = threading.Thread(target=_pump, args=(remote, conn), daemon=True)
            back.start()
            _pump(conn, remote)
            back.join()
        except Exception as exc:  # one failed connection must not stop the listener
            _log.warning("port-forward to %s/%s:%d failed: %s", self.namespace, self.pod, self.port, exc)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            if forward is not None:
                with contextlib.suppress(Exception):
                    forward.close()


@contextlib.contextmanager
def port_forward(api: k8s.ApiClient, namespace: str, pod: str, port: int) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` forwarding to the pod while the block runs."""
    try:
        forward = PortForward(api, namespace, pod, port).start()
    except OSError as exc:
        raise RetryableError(f"could not open a local listener for the port-forward to {pod}: {exc}") from exc
    try:
        yield forward.url
    finally:
        forward.close()


def check_endpoint(url: str, key: SecretStr, model: str, timeout_s: float = 30.0) -> str | None:
    """The rollout's own check before traffic moves: ``/v1/models`` with the key lists ``model``.

    Returns None when it does, else what went wrong (the key never appears in it).
    """
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"}
    try:
        response = httpx.get(f"{url}/v1/models", headers=headers, timeout=timeout_s)
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
