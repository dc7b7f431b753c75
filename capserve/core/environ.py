"""Names of the environment variables the tasks read to reach a stand-in instead of AWS (pure).

They live here, below both, because the tasks read them and the sandbox sets them: the sandbox (a distribution
of its own, ``sandbox/``) stands on capserve's core and tasks, never the other way round.
"""

from __future__ import annotations

REGISTRY_TOOL_ENV = "CAPSERVE_REGISTRY_TOOL"
"""The program that copies the serving image between registries (``capserve.tasks.image_mirror``)."""
