"""The simulated LWS manager (kubernetes-sigs/lws v0.10.0): when it runs, its cert rotator, its webhooks.

What the real ``lws-controller-manager`` does, and when (``cmd/main.go``, ``pkg/cert/cert.go``,
``api/config/v1alpha1/defaults.go``, ``pkg/webhooks/*.go``, ``pkg/utils/pod/pod_utils.go``):

- it runs as the pods of the Deployment ``lws-system/lws-controller-manager``; here "running" means one
  of those pods is Running and Ready (leader election picks one; the sandbox needs only one);
- internal certificate management is on by default: the rotator (open-policy-agent cert-controller)
  writes a CA and a serving certificate into the *existing* Secret ``lws-webhook-server-cert`` (its RBAC
  is get/list/watch/update: it never creates the Secret) and the CA into the ``caBundle`` of
  ``lws-mutating-webhook-configuration`` and ``lws-validating-webhook-configuration``; the manager's
  controllers and webhooks start only once that is done (``certsReady``);
- its webhooks, served behind ``lws-webhook-service`` on port 9443: LeaderWorkerSet defaulting and
  validation, and the pod defaulting that adds the group-index / group-key / worker-index labels and
  injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX`` first in every container.

The sandbox's LWS controller (``lws.py``) reconciles only while ``ready()`` holds. The webhooks answer
the fake API server's admission (``admission.py``) in-process, never over HTTPS. Not modelled:
subgroups, exclusive placement, TPU variables, DisaggregatedSet.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from capserve_sandbox.kube.admission import Admission, Denied, Request
from capserve_sandbox.kube.pods import is_ready
from capserve_sandbox.kube.selectors import matches, parse_label_selector
from capserve_sandbox.kube.store import Store

NAMESPACE = "lws-system"  # config/default kustomization: namespace
DEPLOYMENT = "lws-controller-manager"
SERVICE = "lws-webhook-service"  # defaults.go DefaultWebhookServiceName
SECRET = "lws-webhook-server-cert"  # noqa: S105 - the Secret's name (defaults.go DefaultWebhookSecretName)
WEBHOOK_CONFIGURATIONS = (
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "lws-validating-webhook-configuration"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "lws-mutating-webhook-configuration"),
)
WEBHOOK_PORT = 9443
ROTATOR = "cert-rotator"

PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, GROUP_KEY, WORKER_INDEX = (PREFIX + k for k in ("name", "group-index", "group-key", "worker-index"))
SIZE = PREFIX + "size"
Obj = dict[str, Any]
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _pem(kind: str, what: str) -> str:
    body = base64.b64encode(f"capserve sandbox {what}".encode()).decode()
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


class LwsManager:
    def __init__(self, store: Store, admission: Admission) -> None:
        self.store = store
        admission.register(NAMESPACE, SERVICE, self)

    # ------------------------------------------------------------------ is it running?

    def pods(self) -> list[Obj]:
        deployment = self.store.objects.get(("apps", "deployments", NAMESPACE, DEPLOYMENT))
        if deployment is None:
            return []
        selector = (deployment["spec"].get("selector") or {}).get("matchLabels") or {}
        tests = parse_label_selector(",".join(f"{k}={v}" for k, v in selector.items()))
        return [
            pod
            for key, pod in list(self.store.objects.items())
            if key[:3] == ("", "pods", NAMESPACE) and matches(pod, tests, None)
        ]

    def running(self) -> bool:
        return any((p.get("status") or {}).get("phase") == "Running" and is_ready(p) for p in self.pods())

    def certs_ready(self) -> bool:
        secret = self.store.objects.get(("", "secrets", NAMESPACE, SECRET)) or {}
        return "tls.crt" in (secret.get("data") or {})

    def ready(self) -> bool:
        """The controllers and webhooks have started (main.go: they wait on certsReady)."""
        return self.running() and self.certs_ready()

    # ------------------------------------------------------------------ the cert rotator

    def sync(self) -> None:
        with self.store.lock:
            if not self.running() or self.certs_ready():
                return
            secret = self.store.objects.get(("", "secrets", NAMESPACE, SECRET))
            if secret is None:  # the rotator only updates the Secret the install created
                return
            ca = _pem("CERTIFICATE", "lws-ca")
            data = {
                "ca.crt": ca,
                "ca.key": _pem("RSA PRIVATE KEY", "lws-ca key"),
                "tls.crt": _pem("CERTIFICATE", f"{SERVICE}.{NAMESPACE}.svc"),
                "tls.key": _pem("RSA PRIVATE KEY", "serving key"),
            }
            filled = {**secret, "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
            self.store.put_object(self.store.resource("", "v1", "secrets"), filled, ROTATOR, trusted=True)
            bundle = base64.b64encode(ca.encode()).decode()
            for group, plural, name in WEBHOOK_CONFIGURATIONS:
                configuration = self.store.objects.get((group, plural, None, name))
                if configuration is None:
                    continue
                updated = {**configuration, "webhooks": [
                    {**w, "clientConfig": {**w.get("clientConfig", {}), "caBundle": bundle}}
                    for w in configuration.get("webhooks") or []
                ]}
                self.store.put_object(self.store.resource_for(group, plural), updated, ROTATOR, trusted=True)

    # ------------------------------------------------------------------ the webhook server (admission.Backend)

    def unavailable(self, namespace: str, service: str) -> str | None:
        if self.ready():
            return None
        # The pod is behind the Service but its webhook server does not listen before certsReady.
        ips = [str((p.get("status") or {}).get("podIP")) for p in self.pods() if (p.get("status") or {}).get("podIP")]
        return f"dial tcp {ips[0] if ips else '10.0.0.1'}:{WEBHOOK_PORT}: connect: connection refused"

    def handle(self, path: str, request: Request) -> Obj | None:
        if path == "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset":
            return default_leaderworkerset(request.obj)
        if path == "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset":
            validate_leaderworkerset(request.obj, request.old)
            return request.obj
        if path == "/mutate--v1-pod":
            return default_pod(request.obj)
        if path in ("/validate--v1-pod", "/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset"):
            return request.obj  # pod validation concerns subgroups and exclusive placement only
        return None


# ---------------------------------------------------------------------- pkg/webhooks/leaderworkerset_webhook.go


def default_leaderworkerset(lws: Obj) -> Obj:
    """``Default``: restartPolicy, rolloutStrategy and networkConfig.subdomainPolicy (Shared)."""
    spec = lws.setdefault("spec", {})
    template = spec.setdefault("leaderWorkerTemplate", {})
    if not template.get("restartPolicy"):
        template["restartPolicy"] = "RecreateGroupOnPodRestart"
    if template["restartPolicy"] == "Default":  # the deprecated name of None
        template["restartPolicy"] = "None"
    strategy = spec.setdefault("rolloutStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate" and strategy.get("rollingUpdateConfiguration") is None:
        strategy["rollingUpdateConfiguration"] = {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}
    network = spec.get("networkConfig")
    if network is None:
        spec["networkConfig"] = {"subdomainPolicy": "Shared"}
    elif network.get("subdomainPolicy") is None:
        network["subdomainPolicy"] = "Shared"
    return lws


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return int(-(-share // 1)) if round_up else int(share // 1)
    return int(value)


def _int_or_percent(value: Any, path: str) -> list[str]:
    if isinstance(value, str):
        if not re.fullmatch(r"[0-9]+%", value):
            return [f"{path}: Invalid value: {value!r}: a valid percent string must be a numeric string followed by "
                    "an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"]
        if int(value[:-1]) > 100:
            return [f"{path}: Invalid value: {value!r}: must not be greater than 100%"]
        return []
    if int(value) < 0:
        return [f"{path}: Invalid value: {value}: must be greater than or equal to 0"]
    return []


def validate_leaderworkerset(lws: Obj, old: Obj | None) -> None:
    """``generalValidate`` (and ``ValidateUpdate``'s networkConfig rule); raises Denied with every error."""
    name = lws["metadata"].get("name") or ""
    spec = lws.get("spec") or {}
    template = spec.get("leaderWorkerTemplate") or {}
    errors: list[str] = []
    if not _DNS1035.match(name) or len(name) > 63:
        errors.append(f"metadata.name: Invalid value: {name!r}: a DNS-1035 label must consist of lower case "
                      "alphanumeric characters or '-', start with an alphabetic character, and end with an "
                      "alphanumeric character")
    replicas = int(spec.get("replicas", 1))
    size = int(template.get("size", 1))
    if replicas < 0:
        errors.append(f"spec.replicas: Invalid value: {replicas}: replicas must be equal or greater than 0")
    if replicas > 1_000_000:
        errors.append(f"spec.replicas: Invalid value: {replicas}: replicas must be equal or less than 1000000")
    if size < 1:
        errors.append(f"spec.leaderWorkerTemplate.size: Invalid value: {size}: size must be equal or greater than 1")
    rolling = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    base = "spec.rolloutStrategy.rollingUpdateConfiguration"
    unavailable, surge = rolling.get("maxUnavailable", 1), rolling.get("maxSurge", 0)
    errors += _int_or_percent(unavailable, f"{base}.maxUnavailable")
    errors += _int_or_percent(surge, f"{base}.maxSurge")
    if int(rolling.get("partition", 0)) < 0:
        errors.append(f"{base}.partition: Invalid value: {rolling['partition']}: must be greater than or equal to 0")
    if not errors and replicas and not _scaled(unavailable, replicas, False) and not _scaled(surge, replicas, True):
        errors.append(f"{base}.maxUnavailable: Invalid value: {unavailable}: must not be 0 when `maxSurge` is 0")
    network = spec.get("networkConfig")
    if old is not None and network is not None and network.get("subdomainPolicy") is None:
        errors.append("spec.networkConfig.subdomainPolicy: Invalid value: null: cannot set subdomainPolicy as null")
    if errors:
        message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise Denied(message)


# ---------------------------------------------------------------------- pkg/webhooks/pod_webhook.go, pod_utils.go


def group_key(namespace: str, pod_name: str) -> str:
    """``genGroupUniqueKey``: sha1 of ``<namespace>/<leader pod name>``."""
    return hashlib.sha1(f"{namespace}/{pod_name}".encode(), usedforsecurity=False).hexdigest()  # a label


def _ordinal(pod_name: str) -> int:
    parent, _, ordinal = pod_name.rpartition("-")
    if not parent or not ordinal.isdigit():
        raise Denied(f"parsing pod ordinal for pod {pod_name}")
    return int(ordinal)


def default_pod(pod: Obj) -> Obj:
    """``PodWebhook.Default``: labels from the pod's name (a leader: worker-index 0 set by the controller),
    then ``AddLWSVariables``: the three variables first in every container and init container."""
    metadata = pod["metadata"]
    labels = metadata.setdefault("labels", {})
    if NAME not in labels:
        return pod
    annotations = metadata.get("annotations") or {}
    if SIZE not in annotations:
        raise Denied(f"size annotation is unexpectedly missing for pod {metadata.get('name')}")
    name, namespace = str(metadata.get("name")), str(metadata.get("namespace"))
    if labels.get(WORKER_INDEX) == "0":  # podutils.LeaderPod
        labels.setdefault(GROUP_INDEX, str(_ordinal(name)))
        labels.setdefault(GROUP_KEY, group_key(namespace, name))
    else:
        labels[WORKER_INDEX] = str(_ordinal(name))
    if GROUP_INDEX not in labels:
        raise Denied(
            f"Failure constructing environment variables, no group index label found for pod {namespace}/{name}"
        )
    subdomain = (pod.get("spec") or {}).get("subdomain") or ""
    injected = [
        {"name": "LWS_LEADER_ADDRESS", "value": f"{labels[NAME]}-{labels[GROUP_INDEX]}.{subdomain}.{namespace}"},
        {"name": "LWS_GROUP_SIZE", "value": str(annotations[SIZE])},
        {"name": "LWS_WORKER_INDEX", "value": labels[WORKER_INDEX]},
    ]
    names = {e["name"] for e in injected}
    spec = pod.setdefault("spec", {})
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        rest = [e for e in container.get("env") or [] if e.get("name") not in names]
        container["env"] = [dict(e) for e in injected] + rest
    return pod
