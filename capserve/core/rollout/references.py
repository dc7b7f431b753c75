"""Kubernetes' ``$(VAR)`` expansion of a container's env values, command and args (pure).

Kubernetes docs, "Define Dependent Environment Variables" and the Container API reference (``args``:
"Variable references $(VAR_NAME) are expanded using the container's environment. If a variable cannot be
resolved, the reference in the input string will be unchanged. Double $$ are reduced to a single $").
The rollout relies on it (``--api-key=$(VLLM_API_KEY)``, ``$(LWS_LEADER_ADDRESS)``); preflight expands the
command line the same way before parsing it, and the sandbox's kubelet when it starts a container.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is ``$``, others stay."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)
