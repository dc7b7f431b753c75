"""Environment variables a spec may hand to vLLM (``serving.extra_env``): valid names, plain values, no secrets.

A spec is a file people commit and share, and its values reach the LeaderWorkerSet, the manifests written
under ``out/`` and the campaign record. So a name that says it holds a credential, or a value shaped like one,
is refused: such a value belongs in a Kubernetes Secret that the pod reads by reference, the way the rollout
hands vLLM the endpoint's API key (``capserve/core/rollout/secret.py``: ``valueFrom.secretKeyRef``, never the
value in the pod spec). The error never repeats the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # what a POSIX shell and the kubelet's $(VAR) accept

# Words of a variable name (split at "_") that say it holds a credential: HF_TOKEN, AWS_SECRET_ACCESS_KEY,
# WANDB_API_KEY, OPENAI_API_KEY, DB_PASSWORD, ...
_SECRET_WORDS = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS", "AUTH", "PRIVATE"}
)

# Shapes of credentials, by issuer's documented prefix, plus any long opaque run of key-like characters.
_SECRET_VALUES = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("an API key ('sk-...')", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a bearer credential", re.compile(r"(?i)\bbearer\s+\S{8,}")),
    ("a long opaque token", re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9+=_-]{32,}$")),
)

SECRET_HINT = (
    "serving.extra_env takes plain settings only: put a credential in a Kubernetes Secret and let the pod read "
    "it by reference, as the rollout does for the endpoint's API key (capserve/core/rollout/secret.py)"
)


def env_problems(env: Mapping[str, str]) -> list[str]:
    """What is wrong with ``env`` (empty: nothing), one sentence per variable, never quoting a value."""
    problems = []
    for name, value in env.items():
        if not NAME.match(name):
            problems.append(f"{name!r} is not an environment variable name (letters, digits, '_'; not a digit first)")
            continue
        words = set(name.upper().split("_"))
        if words & _SECRET_WORDS:
            problems.append(f"{name} is named like a credential ({', '.join(sorted(words & _SECRET_WORDS))})")
            continue
        for what, shape in _SECRET_VALUES:
            if shape.search(value):
                problems.append(f"the value of {name} looks like {what}")
                break
    return problems
