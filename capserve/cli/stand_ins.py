"""Finding capserve's sandbox (``capserve up --sandbox``, ``capserve rehearse --sandbox``, ``capserve sandbox``).

The stand-ins are a distribution of their own (``sandbox/``, ``capserve-sandbox``) that registers its modules in
the ``capserve.sandbox`` entry-point group; the CLI loads them from there, so production code never names them
and a production install, which has none, gets one error saying what to install (exit 2: nothing started).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from types import ModuleType

from capserve.core.errors import SpecError

GROUP = "capserve.sandbox"

NOT_INSTALLED = (
    "--sandbox needs capserve's stand-ins, which a production install leaves out: install the capserve-sandbox "
    "distribution (from a checkout: pip install ./sandbox; make demo and make test install it)"
)


def stand_in(name: str) -> ModuleType:
    """The sandbox module registered as ``name`` (``environment``, ``control``); SpecError when none is installed."""
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise SpecError(NOT_INSTALLED)
    module = next(iter(found)).load()
    if not isinstance(module, ModuleType):
        raise SpecError(f"the {GROUP} entry point {name!r} names {module!r}, not a module: reinstall capserve-sandbox")
    return module
