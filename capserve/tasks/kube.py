"""Kubernetes access: in-memory clients, EKS tokens, server-side apply, and watches that wait.

Everything that talks to a Kubernetes API server goes through here. Decisions (is this node
ready? is this DaemonSet done?) are made by the pure functions in ``capserve.core.cluster``.

Clients are built in memory: no kubeconfig is written and the bearer token never reaches a log,
an error message or an artifact. EKS tokens last ~15 minutes, so the client refreshes its token
before every request that would otherwise go out with an expiring one.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import urllib3
from botocore.exceptions import BotoCoreError, ClientError
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.discovery import LazyDiscoverer
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from capserve.core.cluster.readiness import (
    NodeExpectation,
    Readiness,
    WorkloadState,
    assess_nodes,
    pod_problems,
    workload_state,
)
from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import CapserveError, ClusterGoneError, PermanentError, RetryableError
from capserve.core.progress import Progress
from capserve.tasks import aws
from capserve.tasks.manifests import record_applied
from capserve.tasks.progress import ProgressReporter
from capserve.tasks.resilience import NO_RETRIES, kube_task
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock
from capserve.tasks.waiting import pause_on_the_block, wait_timeout

# What flows hold to pass a cluster's client between tasks (flows import no SDK themselves).
KubeApi: TypeAlias = k8s.ApiClient

DEFAULT_FIELD_MANAGER = "capserve"

# `aws eks get-token` (awscli customizations/eks/get_token.py): presign STS GetCallerIdentity with
# the cluster name in the signed header x-k8s-aws-id, URL valid 60 s, token = "k8s-aws-v1." +
# unpadded base64url(URL). aws-iam-authenticator accepts a token for 15 minutes after signing;
# the CLI reports expiry after 14, and so do we.
EKS_TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 - the token format's fixed prefix, not a token
EKS_CLUSTER_ID_HEADER = "x-k8s-aws-id"
EKS_PRESIGN_EXPIRES_S = 60
EKS_TOKEN_LIFETIME_S = 14 * 60.0

TokenProvider = Callable[[], SecretStr]

# Status codes where the API server asks us to come back later (API conventions, "HTTP status codes").
_RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


# --------------------------------------------------------------------------- errors


def convert(exc: BaseException, what: str, *, fix: str | None = None) -> CapserveError:
    """A Kubernetes client error as ours: retryable (429, 5xx, connection trouble) or permanent.

    The API server's ``Status.message`` is kept; response headers are dropped (noise, and they
    could carry cookies). Nothing of the request, so never the bearer token.
    """
    if isinstance(exc, CapserveError):
        return exc
    if isinstance(exc, k8s.ApiException):
        status = int(exc.status or 0)
        text = f"{what}: Kubernetes said {status} {exc.reason or ''}".rstrip() + _status_message(exc.body)
        if status in _RETRYABLE_STATUS:
            return RetryableError(text + " (transient)")
        if status == 401 and not fix:
            fix = "The API server rejected the credentials: check the caller's IAM identity has an EKS access entry."
        return PermanentError(text + (f". {fix}" if fix else ""))
    if isinstance(exc, ResourceNotFoundError):
        return PermanentError(
            f"{what}: the API server does not serve this kind ({exc}). " + (fix or "Install its CRD first.")
        )
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return RetryableError(f"{what}: {type(exc).__name__}: {exc} (transient)")
    return PermanentError(f"{what}: {type(exc).__name__}: {exc}" + (f". {fix}" if fix else ""))


def _status_message(body: object) -> str:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return ""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        return ""
    return f": {message}" if message else ""


# --------------------------------------------------------------------------- clients


def eks_token(cluster_name: str, region: str) -> SecretStr:
    """A bearer token for an EKS cluster, made as ``aws eks get-token`` makes it (no shelling out).

    The token is a presigned STS GetCallerIdentity URL; the cluster's authenticator calls it to
    learn who we are. Only the signature is computed here: no request is sent.
    """
    sts = aws.new_client("sts", region)  # its own: the handler below is for this cluster alone

    def sign_cluster_id(request: Any, **_: Any) -> None:
        # The header is signed but not sent: the authenticator re-adds it with its own cluster id,
        # so a token made for one cluster does not work on another.
        request.headers[EKS_CLUSTER_ID_HEADER] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", sign_cluster_id)
    url = sts.generate_presigned_url(
        "get_caller_identity", Params={}, ExpiresIn=EKS_PRESIGN_EXPIRES_S, HttpMethod="GET"
    )
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return SecretStr(EKS_TOKEN_PREFIX + encoded)


class _RefreshingToken:
    """The ``refresh_api_key_hook`` of a client Configuration: a fresh token before the old one expires.

    The official client calls the hook before every request (``Configuration.get_api_key_with_prefix``).
    """

    def __init__(self, provider: TokenProvider, lifetime_s: float, margin_s: float, clock: Callable[[], float]) -> None:
        self._provider = provider
        self._lifetime_s = lifetime_s
        self._margin_s = margin_s
        self._clock = clock
        self._lock = threading.Lock()
        self._refresh_at: float | None = None
        self.refreshes = 0

    def __call__(self, configuration: k8s.Configuration) -> None:
        with self._lock:
            now = self._clock()
            if self._refresh_at is not None and now < self._refresh_at:
                return
            token = self._provider()
            configuration.api_key["authorization"] = token.get_secret_value()
            self._refresh_at = now + max(self._lifetime_s - self._margin_s, 0.0)
            self.refreshes += 1


def _pem(ca_data: str | bytes | None) -> str | None:
    """EKS returns the cluster CA base64-encoded (``certificateAuthority.data``); kubeconfig does too."""
    if ca_data is None:
        return None
    text = ca_data.decode("ascii") if isinstance(ca_data, bytes) else ca_data
    if text.lstrip().startswith("-----BEGIN"):
        return text
    try:
        return base64.b64decode(text, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise PermanentError("cluster CA data is neither PEM nor base64-encoded PEM") from exc


def api_client(
    endpoint: str,
    ca_data: str | bytes | None,
    token_provider: TokenProvider,
    *,
    token_lifetime_s: float = EKS_TOKEN_LIFETIME_S,
    settings: KubeSettings | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> k8s.ApiClient:
    """An official-client ``ApiClient`` for ``endpoint``, entirely in memory.

    ``ca_data`` (PEM or base64 PEM) is handed to urllib3 as data, never written to a file; it is
    ignored for ``http://`` endpoints (the sandbox). The token comes from ``token_provider`` and
    is replaced ``settings.token_refresh_margin_s`` before ``token_lifetime_s`` runs out.
    """
    settings = settings or KubeSettings()
    configuration = k8s.Configuration(host=endpoint.rstrip("/"))
    if endpoint.startswith("https://"):
        configuration.ca_cert_data = _pem(ca_data)
        configuration.verify_ssl = True
    configuration.api_key_prefix = {"authorization": "Bearer"}
    hook = _RefreshingToken(token_provider, token_lifetime_s, settings.token_refresh_margin_s, clock)
    hook(configuration)  # auth_settings() only sends a key that is already present
    configuration.refresh_api_key_hook = hook  # type: ignore[assignment]
    return k8s.ApiClient(configuration)


class _EksCluster:
    """The EKS cluster behind a client, and when the waits on that client may next ask EKS about it (one
    schedule for all of them: a rollout wait re-watches often, each time in a new ``_watch_until``)."""

    def __init__(self, name: str, region: str) -> None:
        self.name, self.region = name, region
        self.next_check_at = 0.0


# The EKS cluster behind each client made by api_client_for_eks: the waits ask EKS, now and then, whether it
# still exists. Weak: a client dropped by its caller is forgotten here too.
_EKS_CLUSTERS: weakref.WeakKeyDictionary[k8s.ApiClient, _EksCluster] = weakref.WeakKeyDictionary()


def api_client_for_eks(
    endpoint: str, ca_data: str | bytes | None, cluster_name: str, region: str, *, settings: KubeSettings | None = None
) -> k8s.ApiClient:
    """A client for an EKS cluster, authenticated as the caller's AWS identity (as ``aws eks get-token``).

    The waits on this client (nodes, add-ons, Jobs, a rollout) end with ``ClusterGoneError`` once EKS says the
    cluster is deleted or being deleted (``eks_cluster_gone``)."""
    api = api_client(endpoint, ca_data, lambda: eks_token(cluster_name, region), settings=settings)
    _EKS_CLUSTERS[api] = _EksCluster(cluster_name, region)
    return api


def eks_cluster_gone(cluster_name: str, region: str) -> str | None:
    """Why the EKS cluster is gone, or None while it stands (or EKS cannot say now: the wait goes on).

    DescribeCluster answers ``ResourceNotFoundException`` for a cluster that does not exist, and ``status``
    ``DELETING`` while DeleteCluster runs (EKS API reference, DescribeCluster and Cluster). Either way nothing on
    it can become ready, and its API server stops answering (its DNS name goes with it).
    """
    try:
        cluster = aws.client("eks", region).describe_cluster(name=cluster_name)["cluster"]
    except ClientError as exc:
        if aws.error_code(exc) == "ResourceNotFoundException":
            return f"EKS cluster {cluster_name} ({region}) no longer exists (DescribeCluster: {aws.error_code(exc)})"
        return None
    except BotoCoreError:
        return None
    if cluster.get("status") == "DELETING":
        return f"EKS cluster {cluster_name} ({region}) is being deleted (status DELETING)"
    return None


class _GoneCheck:
    """Asks EKS, at most every ``cluster_check_s``, whether the cluster behind ``dyn`` still exists; raises
    ``ClusterGoneError`` when it does not. A client not made for an EKS cluster (a kubeconfig's) is never asked
    about."""

    def __init__(self, dyn: DynamicClient, settings: KubeSettings) -> None:
        self._cluster = _EKS_CLUSTERS.get(dyn.client)
        self._every_s = settings.cluster_check_s
        if self._cluster is not None and not self._cluster.next_check_at:
            self._cluster.next_check_at = time.monotonic() + self._every_s  # the first wait on a fresh client

    @property
    def window_s(self) -> float:
        """The longest a watch may stay open before the next check is due."""
        return self._cluster.next_check_at - time.monotonic() if self._cluster is not None else math.inf

    def __call__(self, what: str, *, now: bool = False, cause: BaseException | None = None) -> None:
        """Check when one is due (or ``now``: the API server stopped answering)."""
        cluster = self._cluster
        if cluster is None or (not now and time.monotonic() < cluster.next_check_at):
            return
        cluster.next_check_at = time.monotonic() + self._every_s
        why = eks_cluster_gone(cluster.name, cluster.region)
        if why is not None:
            raise ClusterGoneError(
                f"{what}: {why}; stopped waiting (nothing on a deleted cluster becomes ready; a scheduled teardown "
                "deletes it at the end of the block: `capserve status` shows what is left)"
            ) from cause


class _InMemoryDiscoverer(LazyDiscoverer):
    """DynamicClient's discovery, without its cache file (it writes /tmp/osrcp-<hash>.json by default)."""

    def _write_cache(self) -> None:
        return None


def dynamic_client(api: k8s.ApiClient) -> DynamicClient:
    # A path that never exists makes the discoverer start empty instead of reading someone's cache.
    never = str(Path(tempfile.gettempdir()) / "capserve-discovery-is-in-memory")
    try:
        return DynamicClient(api, cache_file=never, discoverer=_InMemoryDiscoverer)  # type: ignore[no-untyped-call]
    except Exception as exc:  # discovery: ApiException or a connection error, converted below
        what = f"API discovery at {api.configuration.host}"
        error = convert(exc, what)
        cluster = _EKS_CLUSTERS.get(api)
        if isinstance(error, RetryableError) and cluster is not None:
            # An API server that does not answer may be one whose cluster was deleted: that is not worth retrying.
            why = eks_cluster_gone(cluster.name, cluster.region)
            if why is not None:
                raise ClusterGoneError(f"{what}: {why}") from exc
        raise error from exc


# --------------------------------------------------------------------------- apply


def _describe(manifest: Mapping[str, Any]) -> str:
    metadata = manifest.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{manifest.get('kind')} {namespace + '/' if namespace else ''}{metadata.get('name')}"


def _resource(dyn: DynamicClient, api_version: str, kind: str) -> Any:
    try:
        return dyn.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError as exc:
        raise convert(exc, f"{kind} ({api_version})") from exc


def _apply(dyn: DynamicClient, manifest: Mapping[str, Any], field_manager: str) -> dict[str, Any]:
    resource = _resource(dyn, str(manifest["apiVersion"]), str(manifest["kind"]))
    namespace = (manifest.get("metadata") or {}).get("namespace")
    try:
        # force: we are the owner of what we render; another manager's edit of one of our fields
        # is drift to correct, not a conflict to stop on (kubernetes-client/python#1555: "usually
        # force=true" for controllers).
        result = dyn.server_side_apply(  # type: ignore[no-untyped-call]
            resource, body=dict(manifest), namespace=namespace, field_manager=field_manager, force_conflicts=True
        )
    except Exception as exc:
        raise convert(exc, f"server-side apply of {_describe(manifest)}") from exc
    record_applied(manifest)  # out/<run>/manifests/, secrets redacted (capserve.tasks.manifests)
    applied: dict[str, Any] = result.to_dict()
    return applied


def apply(
    api: k8s.ApiClient, manifest: Mapping[str, Any], field_manager: str = DEFAULT_FIELD_MANAGER
) -> dict[str, Any]:
    """Server-side apply one object of any kind (CRDs' kinds included); returns it as the server has it."""
    return _apply(dynamic_client(api), manifest, field_manager)


def apply_job(
    api: k8s.ApiClient, manifest: Mapping[str, Any], field_manager: str = DEFAULT_FIELD_MANAGER
) -> dict[str, Any]:
    """Server-side apply a Job; one whose pod template changed (another model revision's files, another
    compile-cache key) is deleted and made again: Kubernetes refuses to change a Job's template (it is
    immutable), and a finished Job under the same name would otherwise pass for the new one."""
    dyn = dynamic_client(api)
    try:
        return _apply(dyn, manifest, field_manager)
    except PermanentError as exc:
        if "field is immutable" not in str(exc):  # the API server's Status.message, kept by convert()
            raise
    metadata = manifest.get("metadata") or {}
    jobs = _resource(dyn, "batch/v1", "Job")
    try:
        # Background: the Job object goes at once; its finished pods are garbage-collected after it.
        jobs.delete(name=metadata.get("name"), namespace=metadata.get("namespace"),
                    body={"propagationPolicy": "Background"})
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            raise convert(exc, f"deleting {_describe(manifest)} to make it again") from exc
    return _apply(dyn, manifest, field_manager)


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name')}"


def _watch_until(
    dyn: DynamicClient,
    resource: Any,
    *,
    done: Callable[[dict[str, dict[str, Any]]], bool],
    deadline: float,
    settings: KubeSettings,
    what: str,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> dict[str, dict[str, Any]]:
    """List, then watch from the list's resourceVersion, until ``done(objects)`` or the deadline.

    Returns the objects last seen (by namespace/name) either way; the caller decides what a
    timeout means. A watch that expires (410 Gone) is answered by listing again, as client-go's
    reflector does. A dropped connection or a transient answer (5xx, 429) is answered the same way after a
    pause (``reconnect_max_s``), inside this one deadline: the wait tasks are not retried, because a retried
    wait would start a fresh deadline and wait longer than its caller allowed.
    """
    objects: dict[str, dict[str, Any]] = {}
    version: str | None = None
    pause = 1.0
    selectors = {"namespace": namespace, "label_selector": label_selector, "field_selector": field_selector}
    # A cluster deleted under the wait (the block's scheduled teardown) sends no event: the watch would sit out
    # its window and the wait its deadline. Each window is cut to the check's period, and EKS is asked.
    gone = _GoneCheck(dyn, settings)
    while True:
        try:
            if version is None:
                listing = resource.get(**selectors, _request_timeout=settings.request_timeout_s).to_dict()
                objects = {_key(item): item for item in listing.get("items") or []}
                version = str(listing["metadata"]["resourceVersion"])
                if done(objects):
                    return objects
            gone(what)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return objects
            # A wait on the outside: the block may move by the window meanwhile (its clock says how long to watch here).
            with clock().waiting(min(remaining, settings.watch_window_s, gone.window_s)) as wall_window:
                for event in dyn.watch(  # type: ignore[no-untyped-call]
                    resource, **selectors, resource_version=version, timeout=max(1, math.ceil(wall_window)),
                    allow_watch_bookmarks=True,
                ):
                    raw = event["raw_object"]
                    version = str((raw.get("metadata") or {}).get("resourceVersion") or version)
                    if event["type"] == "DELETED":
                        objects.pop(_key(raw), None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        objects[_key(raw)] = raw
                    if done(objects) or time.monotonic() >= deadline:
                        return objects
            continue  # the window ran out: watch on from the last resourceVersion
        except k8s.ApiException as exc:
            if exc.status == 410:  # our resourceVersion was compacted away: start over from a list
                version = None
                continue
            error = convert(exc, what)
            if not isinstance(error, RetryableError):
                raise error from exc
            gone(what, now=True, cause=exc)  # a 5xx from a control plane being deleted
            dropped: CapserveError = error
        except (urllib3.exceptions.HTTPError, ConnectionError) as exc:
            gone(what, now=True, cause=exc)  # the API server went away: deleted, or a passing outage
            dropped = convert(exc, what)
        # A passing outage: list and watch again after a pause, against the same deadline.
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return objects
        run_logger(__name__).info("%s: %s; watching again in %.0f s", what, dropped, min(pause, remaining))
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, max(settings.reconnect_max_s, 0.1))
        version = None


# --------------------------------------------------------------------------- waits (Prefect tasks)


@kube_task(name="wait-gpu-nodes-ready", policy=NO_RETRIES, cache_policy=NO_CACHE)  # a wait (design.md §6)
def wait_gpu_nodes_ready(api: k8s.ApiClient, expectation: NodeExpectation, settings: KubeSettings) -> Readiness:
    """Watch the nodes until ``expectation`` holds; on timeout raise naming each node and its cause.

    A watch, not a poll: the API server pushes every node change. The deadline is monotonic and
    covers the whole wait, including re-listing after an expired watch.
    """
    deadline = time.monotonic() + settings.nodes_ready_timeout_s
    dyn = dynamic_client(api)
    nodes = _resource(dyn, "v1", "Node")
    reporter = ProgressReporter()

    def ready(seen: dict[str, dict[str, Any]]) -> bool:
        readiness = assess_nodes(list(seen.values()), expectation)
        reporter.report(readiness.progress(expectation.gpus_per_node))
        return readiness.ready

    objects = _watch_until(
        dyn,
        nodes,
        done=ready,
        deadline=deadline,
        settings=settings,
        what="watch of GPU nodes",
        label_selector=expectation.label_selector() or None,
    )
    readiness = assess_nodes(list(objects.values()), expectation)
    if not readiness.ready:
        raise wait_timeout("GPU nodes", settings.nodes_ready_timeout_s, readiness.describe())
    return readiness


@kube_task(name="apply-addons", cache_policy=NO_CACHE)
def apply_addons(
    api: k8s.ApiClient,
    manifests: Sequence[Mapping[str, Any]],
    settings: KubeSettings,
    field_manager: str = DEFAULT_FIELD_MANAGER,
) -> list[dict[str, Any]]:
    """Server-side apply the add-ons: CRDs first, each waited for until Established, then the rest.

    An object of a CRD's kind is rejected by the API server until the CRD is Established
    (Kubernetes docs, "Extend the Kubernetes API with CustomResourceDefinitions").
    """
    dyn = dynamic_client(api)
    crds = [m for m in manifests if m.get("kind") == "CustomResourceDefinition"]
    rest = [m for m in manifests if m.get("kind") != "CustomResourceDefinition"]
    applied = [_apply(dyn, manifest, field_manager) for manifest in crds]
    if crds:
        _wait_objects(dyn, crds, settings, settings.addons_ready_timeout_s, "add-ons")
    applied += [_apply(dyn, manifest, field_manager) for manifest in rest]
    return applied


def _wait_objects(
    dyn: DynamicClient, manifests: Iterable[Mapping[str, Any]], settings: KubeSettings, timeout_s: float, what: str
) -> dict[str, str]:
    """Watch each object until it is ready; raise at the first failure or when ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    outcome: dict[str, str] = {}
    pending: list[str] = []
    manifests = list(manifests)
    reporter = ProgressReporter()
    for index, manifest in enumerate(manifests):
        reporter.report(Progress(f"{what} done", done=index, total=len(manifests)))
        name = str((manifest.get("metadata") or {}).get("name"))
        namespace = (manifest.get("metadata") or {}).get("namespace")
        resource = _resource(dyn, str(manifest["apiVersion"]), str(manifest["kind"]))
        obj = _describe(manifest)
        last: dict[str, tuple[WorkloadState, str]] = {}
        live: dict[str, dict[str, Any]] = {}

        def settled(
            seen: dict[str, dict[str, Any]],
            last: dict[str, tuple[WorkloadState, str]] = last,
            live: dict[str, dict[str, Any]] = live,
        ) -> bool:
            if not seen:
                last["state"] = (WorkloadState.PROGRESSING, "not found")
                return False
            live["object"] = next(iter(seen.values()))
            last["state"] = workload_state(live["object"])
            return last["state"][0].is_terminal

        _watch_until(
            dyn,
            resource,
            done=settled,
            deadline=deadline,
            settings=settings,
            what=f"watch of {obj}",
            namespace=namespace,
            field_selector=f"metadata.name={name}",
        )
        state, reason = last.get("state", (WorkloadState.PROGRESSING, "not observed"))
        if state is WorkloadState.FAILED:
            raise PermanentError(f"{obj} failed: {reason}")
        if state is WorkloadState.PROGRESSING:
            why = _why_not_ready(dyn, live.get("object"), settings)
            pending.append(f"{obj}: {reason}" + (f" ({why})" if why else ""))
        outcome[obj] = reason
    reporter.report(Progress(f"{what} done", done=len(manifests), total=len(manifests)))
    if pending:
        raise wait_timeout(what, timeout_s, "; ".join(pending))
    return outcome


def _why_not_ready(dyn: DynamicClient, obj: Mapping[str, Any] | None, settings: KubeSettings) -> str:
    """The pods of a workload that timed out, and what holds each (Pending with the scheduler's reason,
    image pull, crash loop, OOM). Best effort: a cluster that cannot list them adds nothing."""
    if not obj:
        return ""
    selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    namespace = (obj.get("metadata") or {}).get("namespace")
    if not selector or not namespace:
        return ""
    label_selector = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
    try:
        pods = _resource(dyn, "v1", "Pod").get(
            namespace=namespace, label_selector=label_selector, _request_timeout=settings.request_timeout_s
        )
    except (CapserveError, k8s.ApiException, urllib3.exceptions.HTTPError) as exc:
        return f"its pods could not be listed: {type(exc).__name__}"
    return "; ".join(pod_problems(pods.to_dict().get("items") or []))


@kube_task(name="wait-addons-ready", policy=NO_RETRIES, cache_policy=NO_CACHE)  # a wait (design.md §6)
def wait_addons_ready(
    api: k8s.ApiClient, manifests: Sequence[Mapping[str, Any]], settings: KubeSettings
) -> dict[str, str]:
    """Wait until every applied add-on reports ready (DaemonSets, Deployments, Jobs, CRDs).

    Returns ``{"<Kind> <ns>/<name>": reason}``. Raises PermanentError naming every object still
    not ready at the deadline, or the first that failed (a Job's BackoffLimitExceeded, a
    Deployment's ProgressDeadlineExceeded).
    """
    return _wait_objects(dynamic_client(api), manifests, settings, settings.addons_ready_timeout_s, "add-ons")


@kube_task(name="prove-lws-webhooks", policy=NO_RETRIES, cache_policy=NO_CACHE)  # a wait (design.md §6)
def prove_lws_webhooks(api: k8s.ApiClient, probe: Mapping[str, Any], settings: KubeSettings) -> dict[str, Any]:
    """Server-side dry-run create (``dryRun=All``) of a small LeaderWorkerSet, until LWS's webhooks answer.

    The API server runs the whole admission chain for a dry run and stores nothing (API concepts, "Dry-run").
    A manager pod is Ready (its readyz is a ping) before its cert rotator has written the serving certificate;
    until then every call fails with the API server's ``failed calling webhook`` (500, retried here until
    ``addons_ready_timeout_s``). An answer without the mutating webhook's default
    (``spec.networkConfig.subdomainPolicy``) means the webhook did not run: a permanent error.
    """
    dyn = dynamic_client(api)
    resource = _resource(dyn, str(probe["apiVersion"]), str(probe["kind"]))
    namespace = (probe.get("metadata") or {}).get("namespace")
    deadline = time.monotonic() + settings.addons_ready_timeout_s
    what = f"dry-run create of {_describe(probe)} (LWS webhooks)"
    gone = _GoneCheck(dyn, settings)
    while True:
        gone(what)
        try:
            answer: dict[str, Any] = resource.create(
                body=dict(probe), namespace=namespace, dry_run="All", _request_timeout=settings.request_timeout_s
            ).to_dict()
            break
        except k8s.ApiException as exc:
            error = convert(exc, what)
            if not isinstance(error, RetryableError):
                raise error from exc
            if time.monotonic() >= deadline:
                raise wait_timeout("LWS webhooks", settings.addons_ready_timeout_s, str(error)) from exc
        except (urllib3.exceptions.HTTPError, ConnectionError) as exc:
            gone(what, now=True, cause=exc)  # else a passing outage: asked again, inside the same deadline
            if time.monotonic() >= deadline:
                raise wait_timeout("LWS webhooks", settings.addons_ready_timeout_s, str(convert(exc, what))) from exc
        pause_on_the_block(min(2.0, max(deadline - time.monotonic(), 0.0)))  # 2 s of the block between asks
    policy = ((answer.get("spec") or {}).get("networkConfig") or {}).get("subdomainPolicy")
    if not policy:
        raise PermanentError(
            f"{what}: accepted without the LWS mutating webhook's defaults (spec.networkConfig.subdomainPolicy "
            "unset): check the lws-mutating-webhook-configuration and the lws-controller-manager pods"
        )
    return answer


def wait_workloads_ready(
    api: k8s.ApiClient, manifests: Sequence[Mapping[str, Any]], settings: KubeSettings, *, timeout_s: float, what: str
) -> dict[str, str]:
    """Like ``wait_addons_ready`` for other workloads (e.g. staging Jobs), with their own timeout."""
    return _wait_objects(dynamic_client(api), manifests, settings, timeout_s, what)
