"""matplotlib's pyplot, imported when a plot is first drawn.

Every flow run's process imports the report and evaluation modules, and most never draw: importing pyplot costs
about 0.6 CPU seconds (measured on the 2-core CI machine), paid again by each flow run a worker starts.
"""

from __future__ import annotations

from types import ModuleType


def pyplot() -> ModuleType:
    """pyplot on the Agg backend (no display on a worker or in CI; the backend must be chosen before pyplot loads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
