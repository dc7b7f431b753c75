"""Dynamic admission as the API server runs it: registered webhook configurations, matched and called.

After the Kubernetes docs, "Dynamic Admission Control", and the API server's webhook dispatcher
(kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook``):

- every ``MutatingWebhookConfiguration`` webhook whose ``rules`` (operations, apiGroups, apiVersions,
  resources; ``*`` matches all, a subresource must be named), ``namespaceSelector`` (the object's
  namespace's labels; not for cluster-scoped kinds) and ``objectSelector`` (the new or the old object's
  labels) match is called in turn, in name order, and may change the object; then schema validation;
  then every matching ``ValidatingWebhookConfiguration`` webhook, which may only refuse;
- a webhook is reached through its Service: with no ready address in the Service's Endpoints, the
  call fails with the API server's own words, ``failed calling webhook "<name>": failed to call webhook:
  Post "https://<svc>.<ns>.svc:<port><path>?timeout=<n>s": no endpoints available for service "<svc>"``,
  answered as ``500 InternalError`` ("Internal error occurred: ...") under ``failurePolicy: Fail`` (the v1
  default) and skipped under ``Ignore``;
- a refusal is ``admission webhook "<name>" denied the request: <message>`` with the webhook's code.

No HTTPS call is made: a ``Backend`` registered for a Service (the simulated LWS manager,
``lws_manager.py``) answers in-process, and only while it says it is serving; a Service with ready
addresses but no backend here fails like a server that refuses connections. Dry runs (``dryRun=All``)
run the same chain: webhooks with ``sideEffects`` other than None/NoneOnDryRun refuse a dry run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from capserve_sandbox.kube.errors import ApiError
from capserve_sandbox.kube.resources import Resource

Obj = dict[str, Any]
MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")


@dataclass(frozen=True)
class Request:
    """What an AdmissionReview's request carries (admission/v1 AdmissionRequest), as objects."""

    operation: str  # CREATE | UPDATE
    resource: Resource
    namespace: str | None
    obj: Obj
    old: Obj | None
    dry_run: bool


class Backend(Protocol):
    """A webhook server the sandbox runs in-process for one Service."""

    def unavailable(self, namespace: str, service: str) -> str | None:
        """None while serving; else what the API server's HTTP client reports (``dial tcp ...``)."""

    def handle(self, path: str, request: Request) -> Obj | None:
        """Answer a call: the (possibly changed) object, or raise ``Denied``; None for an unknown path."""


class Denied(Exception):
    def __init__(self, message: str, code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels AND matchExpressions); null or empty matches everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _rule_matches(rule: Mapping[str, Any], operation: str, resource: Resource) -> bool:
    def has(field: str, value: str) -> bool:
        listed = rule.get(field) or []
        return "*" in listed or value in listed

    operations = rule.get("operations") or []
    return (
        ("*" in operations or operation in operations)
        and has("apiGroups", resource.group)
        and has("apiVersions", resource.version)
        and has("resources", resource.plural)  # "pods" does not match pods/status
    )


class Admission:
    """The webhook phase of the fake API server's admission chain."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.backends: dict[tuple[str, str], Backend] = {}  # (namespace, service) -> in-process server

    def register(self, namespace: str, service: str, backend: Backend) -> None:
        self.backends[(namespace, service)] = backend

    # ------------------------------------------------------------------ the two phases

    def mutate(self, request: Request) -> Obj:
        obj = request.obj
        for webhook in self._matching(MUTATING, request):
            answer = self._call(webhook, Request(**{**request.__dict__, "obj": obj}))
            if answer is not None:
                obj = answer
        return obj

    def validate(self, request: Request) -> None:
        for webhook in self._matching(VALIDATING, request):
            self._call(webhook, request)

    # ------------------------------------------------------------------ matching and calling

    def _matching(self, kind: tuple[str, str], request: Request) -> list[Obj]:
        configurations = sorted(
            (obj for key, obj in self.store.objects.items() if key[:2] == kind), key=lambda o: o["metadata"]["name"]
        )
        found = []
        for configuration in configurations:
            for webhook in configuration.get("webhooks") or []:
                if self._applies(webhook, request):
                    found.append(webhook)
        return found

    def _applies(self, webhook: Mapping[str, Any], request: Request) -> bool:
        if not any(_rule_matches(rule, request.operation, request.resource) for rule in webhook.get("rules") or []):
            return False
        if request.resource.namespaced and webhook.get("namespaceSelector"):
            namespace = self.store.objects.get(("", "namespaces", None, request.namespace)) or {}
            if not selector_matches(webhook["namespaceSelector"], namespace.get("metadata", {}).get("labels") or {}):
                return False
        selector = webhook.get("objectSelector")
        candidates = [o for o in (request.obj, request.old) if o is not None]
        return any(selector_matches(selector, (o.get("metadata") or {}).get("labels") or {}) for o in candidates)

    def _call(self, webhook: Mapping[str, Any], request: Request) -> Obj | None:
        name = str(webhook.get("name"))
        config = webhook.get("clientConfig") or {}
        service = config.get("service") or {}
        ignore = webhook.get("failurePolicy", "Fail") == "Ignore"
        if request.dry_run and webhook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            # The dispatcher refuses a dry run a webhook with side effects would see.
            raise ApiError(400, "BadRequest", f'admission webhook "{name}" does not support dry run')
        if not service:
            return self._failed(name, ignore, f'Post "{config.get("url")}": the sandbox calls no URL webhooks')
        svc, namespace = str(service.get("name")), str(service.get("namespace"))
        path = str(service.get("path") or "")
        port, timeout = service.get("port", 443), webhook.get("timeoutSeconds", 10)
        url = f"https://{svc}.{namespace}.svc:{port}{path}?timeout={timeout}s"
        if not self._ready_addresses(namespace, svc):
            return self._failed(name, ignore, f'Post "{url}": no endpoints available for service "{svc}"')
        backend = self.backends.get((namespace, svc))
        why = "dial tcp: connect: connection refused" if backend is None else backend.unavailable(namespace, svc)
        if why is not None:
            return self._failed(name, ignore, f'Post "{url}": {why}')
        assert backend is not None  # noqa: S101 - narrows the type for mypy
        try:
            answer = backend.handle(path, Request(**{**request.__dict__, "obj": copy.deepcopy(request.obj)}))
        except Denied as denied:
            reason = "Forbidden" if denied.code == 403 else "Invalid"
            raise ApiError(denied.code, reason, f'admission webhook "{name}" denied the request: {denied.message}') \
                from denied
        if answer is None:
            return self._failed(name, ignore, f'Post "{url}": the server could not find the requested resource')
        return answer

    def _ready_addresses(self, namespace: str, service: str) -> int:
        endpoints = self.store.objects.get(("", "endpoints", namespace, service)) or {}
        return sum(len(subset.get("addresses") or []) for subset in endpoints.get("subsets") or [])

    @staticmethod
    def _failed(name: str, ignore: bool, reason: str) -> None:
        if ignore:
            return None
        message = f'Internal error occurred: failed calling webhook "{name}": failed to call webhook: {reason}'
        raise ApiError(500, "InternalError", message)
