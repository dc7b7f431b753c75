"""Settings from the environment of the process that runs the flows.

A setting is ``CAPSERVE_<SECTION>__<FIELD>`` (``__`` between levels, any case):
``CAPSERVE_BRING_UP__POLL_SECONDS=5``, ``CAPSERVE_RECORDS__BUCKET=my-records``,
``CAPSERVE_BRING_UP__KUBE__NODES_READY_TIMEOUT_S=3600``. Variables without ``__`` are not settings
(other capserve knobs use them, e.g. the sandbox's). A misspelt section or field is an error naming
the variable, not a silently ignored value: a timeout that does not apply is found only when it bites.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from capserve.core.errors import SpecError
from capserve.core.settings import Settings

ENV_PREFIX = "CAPSERVE_"
ENV_NESTED = "__"


def settings_from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """``Settings`` with every ``CAPSERVE_<SECTION>__<FIELD>`` variable of ``environ`` (default: this process's)."""
    source = os.environ if environ is None else environ
    nested: dict[str, Any] = {}
    names: dict[tuple[str, ...], str] = {}
    for name, value in sorted(source.items()):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or ENV_NESTED not in upper:
            continue
        path = tuple(part.lower() for part in upper.removeprefix(ENV_PREFIX).split(ENV_NESTED))
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError(f"{name}: {'.'.join(path[:-1])} is a single value, not a section of settings")
        node[path[-1]] = value
        names[path] = name
    try:
        return Settings.model_validate(nested)
    except ValidationError as exc:
        problems = [
            f"{_variable(names, err['loc'])}: {'unknown setting' if err['type'] == 'extra_forbidden' else err['msg']}"
            for err in exc.errors(include_url=False)
        ]
        raise SpecError("settings from the environment: " + "; ".join(problems)) from None


def _variable(names: dict[tuple[str, ...], str], loc: tuple[int | str, ...]) -> str:
    """The variable an error is about (the first one under that path)."""
    path = tuple(str(part) for part in loc)
    for variable_path, name in names.items():
        if variable_path[: len(path)] == path:
            return name
    return ENV_PREFIX + ENV_NESTED.join(path).upper()


HUB_ENDPOINT_ENV = "CAPSERVE_HUB_ENDPOINT"


def hub_endpoint_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The Hub endpoint scheduled runs use (``CAPSERVE_HUB_ENDPOINT``; unset: the block's or huggingface.co).

    A scheduled run gets only the campaign id, region and reservation id, so a worker serving the sandbox's
    local Hub says so in its environment (``capserve sandbox`` prints it).
    """
    source = os.environ if environ is None else environ
    return source.get(HUB_ENDPOINT_ENV) or None
