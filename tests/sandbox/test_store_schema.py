"""The fake API server's schema check for built-in kinds is ``kubernetes_validate.validate(obj, version,
strict=True)``, built once per kind (sandbox/capserve_sandbox/kube/store.py): the same verdict and the same error."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from capserve_sandbox.kube.store import _builtin_validator

VERSION = "1.34"  # the fake API server's default
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
BAD_POD: dict[str, Any] = {  # two faults: an unknown field (strict) and a wrong type
    **POD,
    "spec": {"containers": [{"name": "c", "image": 3, "imagePullPolcy": "Always"}]},
}


def test_a_valid_object_passes_both() -> None:
    kubernetes_validate.validate(POD, VERSION, strict=True)
    assert next(iter(_builtin_validator("Pod", "v1", VERSION).iter_errors(POD)), None) is None


def test_an_invalid_object_gets_the_error_kubernetes_validate_raises() -> None:
    with pytest.raises(kubernetes_validate.ValidationError) as raised:
        kubernetes_validate.validate(BAD_POD, VERSION, strict=True)
    ours = next(iter(_builtin_validator("Pod", "v1", VERSION).iter_errors(BAD_POD)), None)  # as the store reads it
    assert ours is not None
    assert (ours.message, list(ours.path)) == (raised.value.message, list(raised.value.path))
