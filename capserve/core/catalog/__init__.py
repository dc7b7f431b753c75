"""The catalog: models, GPUs and instance types as data, plus config.json parsing.

``get_model`` / ``get_instance_type`` raise UnknownCatalogEntryError listing what is known.
"""

from __future__ import annotations

from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.hardware import (
    GPUS,
    INSTANCE_TYPES,
    GpuType,
    InstanceType,
    NetworkCard,
)
from capserve.core.catalog.hf_config import model_from_hf_config, model_to_hf_config
from capserve.core.catalog.models import (
    AttentionKind,
    GqaGeometry,
    KdaGeometry,
    MlaGeometry,
    ModelEntry,
    MoeGeometry,
    Quantization,
    Thinking,
)
from capserve.core.errors import UnknownCatalogEntryError

__all__ = [
    "GPUS",
    "INSTANCE_TYPES",
    "MODELS",
    "AttentionKind",
    "GpuType",
    "GqaGeometry",
    "InstanceType",
    "KdaGeometry",
    "MlaGeometry",
    "ModelEntry",
    "MoeGeometry",
    "NetworkCard",
    "Quantization",
    "Thinking",
    "get_gpu",
    "get_instance_type",
    "get_model",
    "model_from_hf_config",
    "model_to_hf_config",
]


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


def get_gpu(name: str) -> GpuType:
    """The catalog GPU called ``name``."""
    try:
        return GPUS[name]
    except KeyError:
        raise UnknownCatalogEntryError("GPU", name, list(GPUS)) from None
