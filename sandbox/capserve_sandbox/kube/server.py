"""The HTTP face of the fake API server: discovery, auth, REST verbs and streaming watches (aiohttp, loopback).

Paths follow the API server's layout (API concepts, "Resource URIs"):
``/api/v1/[namespaces/<ns>/]<plural>[/<name>[/status]]`` and the same under ``/apis/<group>/<version>``;
pods also serve ``log`` and ``portforward`` (``streams.py``).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from capserve_sandbox.failures import FAILURES
from capserve_sandbox.gates import GATES
from capserve_sandbox.kube import streams
from capserve_sandbox.kube.auth import check_bearer
from capserve_sandbox.kube.errors import ApiError
from capserve_sandbox.kube.resources import Resource
from capserve_sandbox.kube.selectors import matches, parse_label_selector
from capserve_sandbox.kube.store import Event, Store

if TYPE_CHECKING:
    from capserve_sandbox.kube.kubelet import Kubelet

log = logging.getLogger(__name__)

_RESOURCE_PATH = re.compile(r"^/api/(v1)/(.*)$|^/apis/([^/]+)/([^/]+)/(.*)$")
_TRUE = ("true", "1", "t")  # clients send True, true and 1 alike


@dataclass(frozen=True)
class RecordedRequest:
    """What the server saw of one request, for contract assertions in tests. Never the token itself."""

    method: str
    path: str
    content_type: str | None
    auth: str | None  # "eks", "static", or None when rejected


@dataclass(frozen=True)
class Target:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None


class ApiServer:
    def __init__(
        self, store: Store, static_token: str, version: str, bookmark_interval_s: float, kubelet: Kubelet | None = None
    ) -> None:
        self.store = store
        self.kubelet = kubelet
        self.shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self.static_token = static_token
        self.version = version
        self.bookmark_interval_s = bookmark_interval_s
        self.requests: list[RecordedRequest] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Future[None] | None = None
        self._closing = False

    # ------------------------------------------------------------------ wakeups

    def wake(self) -> None:
        """Called (on the loop) after every stored change: resolves the future that watches wait on."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        if self.loop is not None:
            self._changed = self.loop.create_future()

    def close(self) -> None:
        self._closing = True
        self.wake()

    # ------------------------------------------------------------------ dispatch

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth, why = check_bearer(request.headers.get("Authorization"), self.static_token)
        self.requests.append(
            RecordedRequest(request.method, request.path_qs, request.headers.get("Content-Type"), auth)
        )
        try:
            if auth is None:
                raise ApiError(401, "Unauthorized", f"Unauthorized: {why}")
            if request.method == "GET":
                discovery = self.discovery(request.path)
                if discovery is not None:
                    return web.json_response(discovery)
            target = self.target(request.path)
            return await self.dispatch(request, target)
        except ApiError as error:
            return web.json_response(error.status(), status=error.code)
        except Exception as exc:  # noqa: BLE001 - a bug in the fake: answer like an API server would, and report it
            FAILURES.report("fake Kubernetes API server", exc, doing=f"{request.method} {request.path}")
            failure = ApiError(500, "InternalError", f"fake API server error: {type(exc).__name__}: {exc}")
            return web.json_response(failure.status(), status=500)

    async def dispatch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        store = self.store
        resource, namespace, name, sub = target.resource, target.namespace, target.name, target.subresource
        manager = query.get("fieldManager")
        if sub in ("log", "portforward"):
            if self.kubelet is None or name is None or namespace is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
            if request.method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"method {request.method} is not allowed on pods/{sub}")
            handler = streams.pod_log if sub == "log" else streams.pod_portforward
            return await handler(request, self.kubelet, namespace, name)
        if request.method == "GET":
            if query.get("watch", "").lower() in _TRUE:
                return await self.watch(request, target)
            if name:
                return web.json_response(store.get(resource, namespace, name))
            items, revision = store.list_objects(
                resource, namespace, query.get("labelSelector"), query.get("fieldSelector")
            )
            return web.json_response(
                {
                    "apiVersion": resource.api_version,
                    "kind": f"{resource.kind}List",
                    "metadata": {"resourceVersion": revision},
                    "items": items,
                }
            )
        raw = await request.read()
        content_type = (request.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        dry_run = _dry_run(query.getall("dryRun", []))
        if request.method == "POST" and not name:
            created = store.create(resource, namespace, _json(raw), manager, dry_run=dry_run)
            return web.json_response(created, status=201)
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} needs an object name")
        if request.method == "PUT":
            replaced = store.replace(resource, namespace, name, _json(raw), manager, sub, dry_run=dry_run)
            return web.json_response(replaced)
        if request.method == "PATCH":
            if content_type == "application/apply-patch+yaml":  # held before it is stored (fault matrix)
                await GATES.wait_async("apply", f"{resource.kind}/{name}")
            force = query.get("force", "").lower() in _TRUE
            existed = self._exists(target)
            obj = store.patch(resource, namespace, name, raw, content_type, manager, force, sub, dry_run=dry_run)
            return web.json_response(
                obj, status=200 if existed or content_type != "application/apply-patch+yaml" else 201
            )
        if request.method == "DELETE":
            options = _json(raw) if raw.strip() else {}
            # batch/v1 Jobs default to orphaning their pods (the API server warns about it); everything
            # else defaults to background deletion of dependents (API reference, DeleteOptions).
            default = "Orphan" if (resource.group, resource.plural) == ("batch", "jobs") else "Background"
            propagation = query.get("propagationPolicy") or options.get("propagationPolicy") or default
            if propagation not in ("Background", "Foreground", "Orphan"):
                raise ApiError(400, "BadRequest", f"invalid propagationPolicy {propagation!r}")
            return web.json_response(store.delete(resource, namespace, name, propagation))
        raise ApiError(405, "MethodNotAllowed", f"method {request.method} is not allowed")

    def _exists(self, target: Target) -> bool:
        key = (target.resource.group, target.resource.plural, target.namespace, target.name)
        return key in self.store.objects

    def target(self, path: str) -> Target:
        match = _RESOURCE_PATH.match(path)
        if not match:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        group, version, rest = ("", "v1", match.group(2)) if match.group(1) else match.group(3, 4, 5)
        parts = [part for part in rest.split("/") if part]
        namespace = None
        if len(parts) >= 2 and parts[0] == "namespaces" and not (len(parts) == 2 and group == ""):
            namespace, parts = parts[1], parts[2:]
        if not parts:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        resource = self.store.resource(group, version, parts[0])
        if namespace is not None and not resource.namespaced:
            raise ApiError(404, "NotFound", f"{resource.plural} is not namespaced")
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        streaming = (resource.group, resource.plural) == ("", "pods") and sub in ("log", "portforward")
        if sub is not None and not streaming and (sub != "status" or not resource.has_status):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
        return Target(resource, namespace, name, sub)

    # ------------------------------------------------------------------ discovery

    def discovery(self, path: str) -> dict[str, Any] | None:
        path = path.rstrip("/") or "/"
        if path == "/version":
            major, minor = self.version.split(".")
            # The v37 client's VersionInfo model requires every one of these fields.
            return {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{self.version}.0-capserve-sandbox",
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
            }
        groups: dict[str, list[str]] = {}
        for group, version, _ in self.store.resources:
            if group and version not in groups.setdefault(group, []):
                groups[group].append(version)
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group(g, v) for g, v in sorted(groups.items())],
            }
        match = re.match(r"^/apis/([^/]+)$", path)
        if match and match.group(1) in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(match.group(1), groups[match.group(1)])}
        match = re.match(r"^/api/(v1)$|^/apis/([^/]+)/([^/]+)$", path)
        if not match:
            return None
        group, version = ("", "v1") if match.group(1) else (match.group(2), match.group(3))
        listed = []
        for (g, v, _), resource in sorted(self.store.resources.items()):
            if (g, v) != (group, version):
                continue
            listed.append(
                {
                    "name": resource.plural,
                    "singularName": resource.singular,
                    "kind": resource.kind,
                    "namespaced": resource.namespaced,
                    "shortNames": list(resource.short_names),
                    "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                }
            )
            if resource.has_status:
                listed.append(
                    {
                        "name": f"{resource.plural}/status",
                        "singularName": "",
                        "kind": resource.kind,
                        "namespaced": resource.namespaced,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        if not listed:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}".lstrip("/"),
            "resources": listed,
        }

    # ------------------------------------------------------------------ watch

    async def watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        """Stream events as JSON lines until timeoutSeconds (API concepts, "Efficient detection of changes").

        No resourceVersion (or "0"): synthetic ADDED events for what exists, then changes.
        A resourceVersion older than the kept history: one ERROR event with a 410 Status.
        ``allowWatchBookmarks``: BOOKMARK events every ``bookmark_interval_s`` and before closing.
        """
        assert self.loop is not None  # noqa: S101 - narrows the type for mypy
        query = request.query
        resource = target.resource
        tests = parse_label_selector(query.get("labelSelector"))
        field_selector = query.get("fieldSelector") or (f"metadata.name={target.name}" if target.name else None)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        timeout = float(query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)

        def visible(obj: dict[str, Any]) -> bool:
            namespace_ok = target.namespace is None or obj["metadata"].get("namespace") == target.namespace
            return namespace_ok and matches(obj, tests, field_selector)

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        start = query.get("resourceVersion")
        with self.store.lock:
            if not start or start == "0":
                items, revision = self.store.list_objects(
                    resource, target.namespace, query.get("labelSelector"), field_selector
                )
                last = int(revision)
            else:
                items, last = [], int(start) if start.isdigit() else -1
        try:
            for item in items:
                await send("ADDED", item)
            deadline = self.loop.time() + timeout
            next_bookmark = self.loop.time() + self.bookmark_interval_s
            while not self._closing:
                changed = self._changed
                try:
                    events = self._events_after(last)
                except ApiError as error:
                    await send("ERROR", error.status())
                    break
                for event in events:
                    last = event.resource_version
                    if (event.group, event.plural) == (resource.group, resource.plural) and visible(event.obj):
                        await send(event.type, self.store._as_version(dict(event.obj), resource))
                now = self.loop.time()
                if bookmarks and (now >= next_bookmark or now >= deadline):
                    await send(
                        "BOOKMARK",
                        {
                            "kind": resource.kind,
                            "apiVersion": resource.api_version,
                            "metadata": {"resourceVersion": str(max(last, self.store.revision))},
                        },
                    )
                    next_bookmark = now + self.bookmark_interval_s
                if now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                if changed is not None:
                    try:
                        await asyncio.wait_for(asyncio.shield(changed), timeout=max(wait, 0.0))
                    except TimeoutError:
                        pass
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    def _events_after(self, revision: int) -> list[Event]:
        with self.store.lock:
            if revision < self.store.compacted_through:
                raise ApiError(410, "Expired", f"too old resource version: {revision} ({self.store.compacted_through})")
            events = self.store.events
            start = bisect.bisect_right(events, revision, key=lambda event: event.resource_version)
            return events[start:]


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
    }


def _dry_run(values: list[str]) -> bool:
    """``dryRun=All`` runs the request through admission and validation without storing it; it is the
    only value the API server accepts (API concepts, "Dry-run")."""
    for value in values:
        if value != "All":
            raise ApiError(400, "BadRequest", f'Invalid value: "{value}": supported values: "All"')
    return bool(values)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be an object")
    return body


def _report_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio would print to stderr (a task's exception nobody retrieved, a callback that raised) is a failure
    of the fake Kubernetes: reported (capserve_sandbox.failures), unless it is a connection the client dropped."""
    error = context.get("exception")
    if not isinstance(error, Exception) or isinstance(error, ConnectionError):
        loop.default_exception_handler(context)  # a warning without an error (an unclosed session): logged as ever
        return
    FAILURES.report("fake Kubernetes event loop", error, doing=str(context.get("message") or ""))


class ServerThread:
    """Runs ``ApiServer``s on 127.0.0.1 in a thread with its own event loop: ``api`` from ``start()``, and more
    (one per sandbox EKS cluster, ``add``) on the same loop, each on its own free port, as each EKS cluster has
    its own API endpoint. A thread and a loop for all of them: an idle cluster costs a listening socket."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.port = 0
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runners: dict[int, web.AppRunner] = {}  # id(api) -> its site's runner, while it serves
        self._served: list[ApiServer] = []
        self._thread = threading.Thread(target=self._run, name="fake-kube-apiserver", daemon=True)

    def start(self) -> str:
        self._thread.start()
        if not self._started.wait(30) or self._error is not None:
            raise RuntimeError(f"fake Kubernetes API server did not start: {self._error}")
        return f"http://127.0.0.1:{self.port}"

    def add(self, api: ApiServer) -> str:
        """Serve another API server on this thread's loop, on a free port of its own; its URL."""
        port = self._call(self._serve_api(api))
        return f"http://127.0.0.1:{port}"

    def remove(self, api: ApiServer) -> None:
        """Stop serving ``api`` (its port closes, its shutdown hooks run); the thread and the others go on."""
        if self._loop is not None and self._loop.is_running():
            self._call(self._close_api(api))

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._stop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _call(self, work: Any) -> Any:
        if self._loop is None or not self._loop.is_running():
            work.close()
            raise RuntimeError("the fake Kubernetes API server thread is not running")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=60)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start(); the thread must not die silently
            self._error = exc
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_report_loop_error)
        self._stop = asyncio.Event()
        self.port = await self._serve_api(self.api)
        self._started.set()
        await self._stop.wait()
        for api in [*[a for a in self._served if a is not self.api], self.api]:  # the first one's last
            await self._close_api(api)

    async def _serve_api(self, api: ApiServer) -> int:
        api.loop = asyncio.get_running_loop()
        api._closing = False
        api.wake()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", api.handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners[id(api)] = runner
        self._served.append(api)
        return int(runner.addresses[0][1])

    async def _close_api(self, api: ApiServer) -> None:
        runner = self._runners.pop(id(api), None)
        if runner is None:
            return
        self._served.remove(api)
        api.close()
        for hook in api.shutdown_hooks:  # the kubelet stops its containers while the loop still runs
            try:
                await asyncio.wait_for(hook(), timeout=30)
            except Exception:  # shutting down: log and go on, the processes are killed at exit anyway
                log.exception("fake Kubernetes shutdown hook failed")
        await runner.cleanup()
