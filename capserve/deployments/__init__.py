"""capserve's deployment definitions, shipped as package data (``prefect.yaml`` beside this module).

They travel inside the wheel so that ``capserve deploy`` registers them from an installed package, with no
checkout: each entrypoint is a module path (``capserve.flows.campaign.campaign``), which a worker's flow process
imports from the installed capserve instead of loading a file relative to a working directory (docs/prefect.md
§13). This module only reads the file (no Prefect): ``capserve.cli.deploy`` registers what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

FILE = "prefect.yaml"
DEFAULT_POOL = "capserve"


@dataclass(frozen=True)
class Definition:
    """One deployment of the file: ``flow_module.function`` to run, and what the deployment fixes."""

    name: str
    entrypoint: str  # a module path: ``package.module.function``
    job_variables: dict[str, Any] = field(default_factory=dict)  # the process pool's (stream_output)
    parameters: dict[str, Any] = field(default_factory=dict)
    schedules: list[dict[str, Any]] = field(default_factory=list)  # cron, timezone, active
    concurrency_limit: dict[str, Any] | None = None  # limit, collision_strategy

    @property
    def module(self) -> str:
        return self.entrypoint.rpartition(".")[0]

    @property
    def function(self) -> str:
        return self.entrypoint.rpartition(".")[2]


def text() -> str:
    """The packaged file, as shipped."""
    return resources.files(__name__).joinpath(FILE).read_text(encoding="utf-8")


def definitions() -> list[Definition]:
    """Every deployment of the packaged file, in its order."""
    document = yaml.safe_load(text())
    found = []
    for entry in document["deployments"]:
        entrypoint = str(entry["entrypoint"])
        # A colon or a file path would be loaded relative to the run's working directory: only a checkout has it.
        if ":" in entrypoint or "/" in entrypoint or entrypoint.endswith(".py"):
            raise ValueError(f"deployment {entry['name']!r}: entrypoint {entrypoint!r} is not a module path")
        found.append(Definition(
            name=str(entry["name"]),
            entrypoint=entrypoint,
            job_variables=dict((entry.get("work_pool") or {}).get("job_variables") or {}),
            parameters=dict(entry.get("parameters") or {}),
            schedules=list(entry.get("schedules") or []),
            concurrency_limit=entry.get("concurrency_limit"),
        ))
    return found
