"""The pod subresources that stream: ``pods/log`` and ``pods/portforward`` (WebSocket, ``v4.channel.k8s.io``).

``GET .../pods/<name>/log?container=&tailLines=&limitBytes=&previous=&timestamps=&follow=`` answers text/plain
with the container's output (``follow`` keeps the response open while the container runs; ``limitBytes``: at most
that many bytes from the start of the answer, as the Kubernetes API's ``PodLogOptions.limitBytes``).

``GET .../pods/<name>/portforward?ports=8000`` upgraded to a WebSocket speaks the channel protocol
the official client's ``kubernetes.stream.portforward`` speaks (kubernetes/client-go
``tools/portforward``; kubelet ``pkg/kubelet/cri/streaming/portforward/websocket.go``): for the i-th
port, channel 2i carries data and channel 2i+1 errors; each frame starts with its channel byte; the
first frame on each channel carries the port number, 2 bytes little-endian. Each port is one TCP
connection to the pod's local process, opened when the WebSocket opens.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from capserve_sandbox.kube.errors import ApiError

if TYPE_CHECKING:
    from capserve_sandbox.kube.kubelet import Kubelet

PROTOCOL = "v4.channel.k8s.io"
_TRUE = ("true", "1", "t")


async def pod_log(request: web.Request, kubelet: Kubelet, namespace: str, name: str) -> web.StreamResponse:
    query = request.query
    tail = query.get("tailLines")
    options = {
        "previous": query.get("previous", "").lower() in _TRUE,
        "tail": int(tail) if tail not in (None, "") else None,
        "timestamps": query.get("timestamps", "").lower() in _TRUE,
    }
    container = query.get("container") or None
    text = kubelet.logs(namespace, name, container, **options)  # type: ignore[arg-type]
    if query.get("follow", "").lower() not in _TRUE or options["previous"]:
        limit = query.get("limitBytes")
        if limit not in (None, ""):
            text = text.encode()[: int(limit)].decode(errors="ignore")
        return web.Response(text=text, content_type="text/plain")
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    sent = text
    await response.write(sent.encode())
    while True:
        await asyncio.sleep(0.1)
        try:
            now = kubelet.logs(
                namespace, name, container, previous=False, tail=None, timestamps=bool(options["timestamps"])
            )
        except ApiError:
            break
        if len(now) > len(sent) and now.startswith(sent):
            await response.write(now[len(sent) :].encode())
        sent = now
        pod = kubelet.store.objects.get(("", "pods", namespace, name))
        if pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            break
    await response.write_eof()
    return response


def _ports(request: web.Request) -> list[int]:
    ports: list[int] = []
    for value in request.query.getall("ports", []):
        for part in value.split(","):
            if not part.strip().isdigit():
                raise ApiError(400, "BadRequest", f"invalid port {part!r}")
            ports.append(int(part))
    if not ports:
        raise ApiError(400, "BadRequest", "at least one port must be specified")
    return ports


async def pod_portforward(request: web.Request, kubelet: Kubelet, namespace: str, name: str) -> web.StreamResponse:
    ports = _ports(request)
    locals_: list[int | None] = []
    errors: list[str | None] = []
    for port in ports:
        try:
            locals_.append(kubelet.local_port(namespace, name, port))
            errors.append(None)
        except LookupError as missing:
            locals_.append(None)
            errors.append(str(missing.args[0]))
    ws = web.WebSocketResponse(protocols=(PROTOCOL,))
    await ws.prepare(request)
    writers: dict[int, asyncio.StreamWriter] = {}
    pumps: list[asyncio.Task[None]] = []
    for index, port in enumerate(ports):
        number = port.to_bytes(2, "little")
        await ws.send_bytes(bytes([2 * index]) + number)
        await ws.send_bytes(bytes([2 * index + 1]) + number)
        local = locals_[index]
        if local is None:
            await ws.send_bytes(bytes([2 * index + 1]) + str(errors[index]).encode())
            continue
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", local)
        except OSError as exc:
            message = f"error forwarding port {port} to pod {name}: dial tcp4 127.0.0.1:{port}: {exc.strerror}"
            await ws.send_bytes(bytes([2 * index + 1]) + message.encode())
            continue
        writers[2 * index] = writer
        pumps.append(asyncio.ensure_future(_to_websocket(reader, ws, 2 * index)))
    try:
        receive = asyncio.ensure_future(_from_websocket(ws, writers))
        if pumps:
            await asyncio.wait([receive, *pumps], return_when=asyncio.FIRST_COMPLETED)
        else:
            await receive
    finally:
        for task in pumps:
            task.cancel()
        receive.cancel()
        for writer in writers.values():
            writer.close()
        await ws.close()
    return ws


async def _to_websocket(reader: asyncio.StreamReader, ws: web.WebSocketResponse, channel: int) -> None:
    with contextlib.suppress(ConnectionError):
        while True:
            chunk = await reader.read(64 * 1024)
            if not chunk:
                return
            await ws.send_bytes(bytes([channel]) + chunk)


async def _from_websocket(ws: web.WebSocketResponse, writers: dict[int, asyncio.StreamWriter]) -> None:
    async for message in ws:
        if message.type != WSMsgType.BINARY or not message.data:
            continue
        channel, payload = message.data[0], message.data[1:]
        writer = writers.get(channel)
        if writer is not None and payload:
            writer.write(payload)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
