"""What a rollout serves, as a small model: the campaign record keeps the last good one for rollback.

A ``RolloutConfig`` holds everything that decides what the pods run (image, model revision, layout,
engine options, endpoint access, caching) and nothing about where (nodes, colour). Rendering the
last good config again, under the other colour, *is* the rollback. ``revision`` names a config by
its content; ``cache_key`` names the compile caches it can share.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.planner import ServingPlan
from capserve.core.rollout.args import EngineOptions
from capserve.core.rollout.layout import ServingLayout, layout_from_plan
from capserve.core.spec import CampaignSpec
from capserve.core.weights.listing import SHA1_HEX

EndpointAccess = Literal["port-forward", "internal-nlb"]
_DIGEST = r"^sha256:[0-9a-f]{64}$"


class RolloutConfig(BaseModel):
    """One serving configuration, independent of nodes and colour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1, max_length=255, description="vLLM container image.")
    image_digest: str | None = Field(
        None, pattern=_DIGEST, description="The image's digest when known (from '@sha256:' or the registry)."
    )
    model_repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name' of the weights.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="Pinned commit the staged weights come from.")
    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type of the GPU nodes.")
    layout: ServingLayout = Field(description="Nodes, TP/PP/DP/EP, replicas.")
    engine: EngineOptions = Field(description="Lengths, KV dtype, memory ceiling, served name, extra args.")
    endpoint_access: EndpointAccess = Field("port-forward", description="How the endpoint is reached.")
    compile_cache: bool = Field(True, description="Restore/save compile caches through S3.")
    model_bytes: int = Field(ge=0, description="Bytes of the whole checkpoint (the compile part of the budget).")
    node_bytes: int = Field(ge=0, description="Bytes the fullest node loads (the load part of the budget).")
    splits_experts: bool = Field(description="Nodes hold different experts: each pod must run on its own node.")
    startup_budget_minutes: int | None = Field(None, ge=5, le=24 * 60, description="The spec's override, if any.")

    @property
    def image_ref(self) -> str:
        """The image as pulled: by digest when it is known (a tag can move between runs)."""
        if "@sha256:" in self.image or self.image_digest is None:
            return self.image
        return f"{self.image.split('@')[0]}@{self.image_digest}"

    @property
    def pinned_digest(self) -> str | None:
        if "@sha256:" in self.image:
            return self.image.split("@", 1)[1]
        return self.image_digest

    @property
    def revision(self) -> str:
        """10 hex characters naming this configuration (label ``capserve.io/revision``)."""
        return _digest(self.model_dump(mode="json"))[:10]

    @property
    def cache_key(self) -> str:
        """Which compile caches this configuration can reuse: image (digest when known), model revision, layout.

        vLLM's own cache hash also covers the model path, ``--max-model-len`` and every setting that
        changes compiled code (docs/serving.md §4); keying by the same inputs means a restored cache is
        one vLLM will find, and a configuration that would miss anyway gets its own key. Endpoint
        access, budgets and replica count do not change compiled code and are left out.
        """
        layout = self.layout.model_dump(mode="json", exclude={"replicas"})
        engine = self.engine.model_dump(mode="json", exclude={"served_model_name"})
        parts = {
            "image": self.pinned_digest or self.image,
            "model": f"{self.model_repo}@{self.revision_sha}",
            "instance_type": self.instance_type,
            "layout": layout,
            "engine": engine,
        }
        return _digest(parts)[:16]


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def engine_options(plan: ServingPlan, spec: CampaignSpec) -> EngineOptions:
    """The engine options the plan was computed for, plus the spec's served name and extra args."""
    return EngineOptions(
        served_model_name=spec.served_model_name,
        max_model_len=plan.context_length,
        max_num_seqs=plan.parallel.sequences_per_dp_rank,  # vLLM's --max-num-seqs counts per DP rank
        kv_cache_dtype="fp8" if plan.kv_cache_dtype_bytes == 1 else "auto",
        gpu_memory_utilization=plan.gpu_memory_utilization,
        extra_args=tuple(spec.serving.extra_args),
    )


def rollout_config(
    plan: ServingPlan,
    spec: CampaignSpec,
    *,
    model_repo: str,
    revision_sha: str,
    node_bytes: int,
    splits_experts: bool,
    image_digest: str | None = None,
) -> RolloutConfig:
    """The configuration a campaign rolls out, from its plan, its spec and the staged weights.

    ``node_bytes`` and ``splits_experts`` come from the weights stage (the manifest's fullest node,
    and whether nodes hold different experts: ``placement.Layout.splits_experts``).
    """
    return RolloutConfig(
        image=spec.serving.image,
        image_digest=image_digest,
        model_repo=model_repo,
        revision_sha=revision_sha,
        instance_type=plan.instance_type,
        layout=layout_from_plan(plan, replicas=spec.serving.replicas),
        engine=engine_options(plan, spec),
        endpoint_access=spec.serving.endpoint_access,
        compile_cache=spec.serving.compile_cache,
        model_bytes=plan.weight_bytes,
        node_bytes=node_bytes,
        splits_experts=splits_experts,
        startup_budget_minutes=spec.serving.startup_budget_minutes,
    )
