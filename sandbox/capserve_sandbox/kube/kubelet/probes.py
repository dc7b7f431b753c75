"""One probe attempt against a container's local process, with the kubelet's outcome and message.

Semantics (Kubernetes docs, "Configure Liveness, Readiness and Startup Probes"): ``httpGet`` succeeds
on a status from 200 to 399, ``tcpSocket`` when the connection opens; ``exec`` is not run in the
sandbox and passes. The messages are the kubelet's (``Get "http://<pod IP>:<port><path>": dial tcp
...: connect: connection refused``, ``HTTP probe failed with statuscode: 503``). A placeholder
container has no process: its probes pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capserve_sandbox.kube.kubelet.runtimes import Runtime


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    message: str = ""


def resolve_port(container: Mapping[str, Any], port: Any) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    return None


async def run_probe(
    probe: Mapping[str, Any], container: Mapping[str, Any], runtime: Runtime, pod_ip: str
) -> ProbeResult:
    if "exec" in probe or "grpc" in probe or runtime.passes_probes_offline:
        return ProbeResult(True)
    timeout = min(float(probe.get("timeoutSeconds") or 1), 10.0)
    if "httpGet" in probe:
        action = probe["httpGet"]
        port = resolve_port(container, action.get("port"))
        path = str(action.get("path") or "/")
        url = f'Get "http://{pod_ip}:{port}{path}"'
        local = runtime.ports.get(port) if port is not None else None
        if local is None:
            return ProbeResult(False, f"{url}: dial tcp {pod_ip}:{port}: connect: connection refused")
        headers = "".join(f"{h['name']}: {h['value']}\r\n" for h in action.get("httpHeaders") or [])
        try:
            status = await asyncio.wait_for(_http_get(local, path, headers), timeout=timeout)
        except TimeoutError:
            return ProbeResult(
                False, f"{url}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )
        except OSError:
            return ProbeResult(False, f"{url}: dial tcp {pod_ip}:{port}: connect: connection refused")
        if 200 <= status < 400:
            return ProbeResult(True)
        return ProbeResult(False, f"HTTP probe failed with statuscode: {status}")
    if "tcpSocket" in probe:
        port = resolve_port(container, probe["tcpSocket"].get("port"))
        local = runtime.ports.get(port) if port is not None else None
        refused = ProbeResult(False, f"dial tcp {pod_ip}:{port}: connect: connection refused")
        if local is None:
            return refused
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", local), timeout=timeout)
        except (OSError, TimeoutError):
            return refused
        writer.close()
        return ProbeResult(True)
    return ProbeResult(True)


async def _http_get(port: int, path: str, headers: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.34\r\n"
            f"{headers}Connection: close\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        line = await reader.readline()
        parts = line.decode("latin-1").split()
        if len(parts) < 2 or not parts[1].isdigit():
            raise OSError("malformed HTTP response")
        return int(parts[1])
    finally:
        writer.close()
