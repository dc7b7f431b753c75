"""The catalog: models, GPUs and instance types as data, plus config.json parsing.

``get_model`` / ``get_instance_type`` raise UnknownCatalogEntryError listing what is known.
"""

from __future__ import annotations

from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.hardware import INSTANCE_TYPES, InstanceType
from capserve.core.catalog.models import ModelEntry
from capserve.core.errors import UnknownCatalogEntryError


def get_model(name: str) -> ModelEntry:
    """The catalog model called ``name``."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownCatalogEntryError("model", name, list(MODELS)) from None


def get_instance_type(name: str) -> InstanceType:
    """The catalog instance type called ``name`` (EC2 spelling; an ``ml.`` prefix is accepted)."""
    key = name.removeprefix("ml.")
    try:
        return INSTANCE_TYPES[key]
    except KeyError:
        raise UnknownCatalogEntryError("instance type", name, list(INSTANCE_TYPES)) from None
