"""Weights stage, pure part: file listing, per-node plan, re-shard plan, manifest, staging Job."""

from capserve.core.weights.listing import RepoFile, RepoListing
from capserve.core.weights.manifest import StagedFile, WeightsManifest, manifest_key, s3_base
from capserve.core.weights.placement import Layout, expert_of, expert_rank, rank_experts
from capserve.core.weights.plan import INDEX_NAME, NodePlan, WeightsPlan, index_document, plan_weights
from capserve.core.weights.reshard import ReshardPlan, plan_reshard
from capserve.core.weights.result import WeightsResult
from capserve.core.weights.safetensors import SafetensorsHeader, TensorEntry, parse_header
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import render_staging_job

__all__ = [
    "INDEX_NAME",
    "Layout",
    "NodePlan",
    "RepoFile",
    "RepoListing",
    "ReshardPlan",
    "SafetensorsHeader",
    "StagedFile",
    "TensorEntry",
    "WeightsManifest",
    "WeightsPlan",
    "WeightsResult",
    "WeightsSettings",
    "expert_of",
    "expert_rank",
    "index_document",
    "manifest_key",
    "parse_header",
    "plan_reshard",
    "plan_weights",
    "rank_experts",
    "render_staging_job",
    "s3_base",
]
