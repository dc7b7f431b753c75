"""Local stand-ins for AWS, Kubernetes, the Hub and the endpoint (docs/sandbox.md): demo and tests only.

Its packages come with the ``[sandbox]`` extra, which a production install leaves out (docs/README.md),
so importing it without them fails here, once, with the command that fixes it.
"""

from __future__ import annotations

import importlib.util

# Import names of the packages only the sandbox needs: the ``sandbox`` extra in pyproject.toml.
EXTRA_MODULES = ("moto", "jsonpatch", "kubernetes_validate", "numpy")


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a blocked or half-installed package
            found = False
        if not found:
            missing.append(name)
    return missing


if _absent := _missing(EXTRA_MODULES):
    raise ModuleNotFoundError(
        f"capserve's sandbox needs packages a production install leaves out (missing: {', '.join(_absent)}). "
        "Install them with: pip install 'capserve[sandbox]' (from a checkout: pip install -e '.[dev]').",
        name=_absent[0],
    )
