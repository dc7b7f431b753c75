"""What a rollout serves, as a small model: the campaign record keeps the last good one for rollback.

A ``RolloutConfig`` holds everything that decides what the pods run (image, model revision, layout,
engine options, endpoint access, caching) and nothing about where (nodes, colour). Rendering the
last good config again, under the other colour, *is* the rollback. ``revision`` names a config by
its content; ``cache_key`` names the compile caches it can share.

The layout is the planner's own (``ServingPlan.parallel``). Both names digest it in the form configs had
before the rollout took the planner's model (``_LAYOUT_KEYS``), so workloads already labelled and compile
caches already saved keep their names, and a stored config of that form still loads (``_read_old_layout``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capserve.core.catalog import get_instance_type
from capserve.core.catalog.recipes import recipe_for
from capserve.core.planner.plan import ParallelLayout, ServingPlan
from capserve.core.planner.shapes import Shape
from capserve.core.rollout.args import EngineOptions, compose_env, compose_extra_args, recipe_arguments
from capserve.core.spec import CampaignSpec
from capserve.core.timeline import CompileShape
from capserve.core.weights.listing import SHA1_HEX

# Only the port-forward: an internal NLB needs the AWS Load Balancer Controller, which is not installed
# (the spec refuses 'internal-nlb', capserve.core.spec.NO_INTERNAL_NLB).
EndpointAccess = Literal["port-forward"]
_DIGEST = r"^sha256:[0-9a-f]{64}$"

# The layout's fields the pods are rendered from, by the names configs stored them under before the rollout
# took the planner's layout (``nodes`` was one copy's nodes). The planner's other fields change no pod.
_LAYOUT_KEYS = (
    "nodes", "gpus_per_node", "tensor_parallel", "pipeline_parallel", "data_parallel", "data_parallel_local",
    "expert_parallel", "enable_expert_parallel",
)  # fmt: skip
_PLANNER_NAMES = {"nodes": "nodes_per_replica"}


class RolloutConfig(BaseModel):
    """One serving configuration, independent of nodes and colour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1, max_length=255, description="vLLM container image.")
    image_digest: str | None = Field(
        None, pattern=_DIGEST, description="The image's digest when known (from '@sha256:' or the registry)."
    )
    model_repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name' of the weights.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="Pinned commit the staged weights come from.")
    model_config_digest: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="The staged config.json as vLLM's compile cache sees it (``compile_config_digest``); None: "
        "not read, and the compile-cache key falls back to the revision.",
    )
    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type of the GPU nodes.")
    layout: ParallelLayout = Field(description="The plan's layout of one copy: nodes, TP/PP/DP/EP.")
    replicas: int = Field(1, ge=1, le=64, description="Independent model copies (LWS groups): serving.replicas.")
    engine: EngineOptions = Field(description="Lengths, KV dtype, memory ceiling, served name, extra args.")
    endpoint_access: EndpointAccess = Field("port-forward", description="How the endpoint is reached.")
    compile_cache: bool = Field(True, description="Restore/save compile caches through S3.")
    model_bytes: int = Field(ge=0, description="Bytes of the whole checkpoint.")
    compile_shape: CompileShape = Field(
        default_factory=CompileShape,
        description="What compile and graph capture depend on (the compile part of the startup budget); a record "
        "written before it has the time model's shape of an unknown architecture.",
    )
    node_bytes: int = Field(ge=0, description="Bytes the fullest node loads (the load part of the budget).")
    splits_experts: bool = Field(description="Nodes hold different experts: each pod must run on its own node.")
    startup_budget_minutes: int | None = Field(None, ge=5, le=24 * 60, description="The spec's override, if any.")

    @model_validator(mode="before")
    @classmethod
    def _read_old_layout(cls, data: Any) -> Any:
        """Read a config stored with the rollout's own layout (``{nodes, …, replicas}``) with the planner's."""
        layout = data.get("layout") if isinstance(data, dict) else None
        if not isinstance(layout, dict) or "layout" in layout:
            return data  # the planner's form
        if not all(isinstance(layout.get(key), int) for key in _LAYOUT_KEYS):
            return data  # not a layout of either form: validation says what is wrong
        old = {_PLANNER_NAMES.get(key, key): layout[key] for key in _LAYOUT_KEYS}
        nodes, per_node = old["nodes_per_replica"], old["gpus_per_node"]
        shape = Shape(
            tp=old["tensor_parallel"], pp=old["pipeline_parallel"], dp=old["data_parallel"],
            expert_parallel=old["enable_expert_parallel"], gpus_per_node=per_node,
        )  # fmt: skip
        engine = data.get("engine")
        # What the old form did not keep, as the planner states it for one engine per copy; the sequences
        # per rank are the engine's (``engine_options`` copies them from the plan).
        derived = {
            "layout": shape.name,
            "nodes": nodes,
            "gpus_per_node_used": per_node if nodes > 1 else shape.gpus,
            "serving_replicas": 1,
            "gpus_per_replica": shape.gpus,
            "sequences_per_dp_rank": engine.get("max_num_seqs", 1) if isinstance(engine, dict) else 1,
        }
        return {**data, "replicas": layout.get("replicas", 1), "layout": {**derived, **old}}

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
        # The compile shape is the time model's reading of this configuration, not a part of it.
        config = self.model_dump(mode="json", exclude={"replicas", "compile_shape"})
        if config["model_config_digest"] is None:  # configs from before the digest keep their revision
            del config["model_config_digest"]
        config["engine"] = _engine_digested(config["engine"])
        return _digest({**config, "layout": {**self._layout_digested(), "replicas": self.replicas}})[:10]

    @property
    def cache_key(self) -> str:
        """Which compile caches this configuration can reuse: what changes the compiled graphs, and nothing else.

        vLLM's own compile hash covers its version, the model path, the model's config.json, the layout's
        sizes, ``--max-model-len`` and the other engine settings and environment variables that change compiled
        code, and not the weights (docs/serving.md §4). The pods name the weights by a path that does not
        change with the revision (``served_model_path``), so a new revision of the same architecture finds the
        compiled graphs of the last one: the key holds the image (vLLM's version; its digest when known), the
        repo (the path), the config.json digest, the instance type, the layout and the engine options, and
        never the revision or the weights' hashes. Without a config.json digest the revision stands in for it.
        Endpoint access, budgets and replica count do not change compiled code and are left out.
        """
        engine = _engine_digested(self.engine.model_dump(mode="json", exclude={"served_model_name"}))
        parts = {
            "image": self.pinned_digest or self.image,
            "model": self.model_repo,
            "config": self.model_config_digest or f"revision {self.revision_sha}",
            "instance_type": self.instance_type,
            "layout": self._layout_digested(),
            "engine": engine,
        }
        return _digest(parts)[:16]

    def _layout_digested(self) -> dict[str, int | bool]:
        """The layout as ``revision`` and ``cache_key`` digest it: ``_LAYOUT_KEYS``, under their old names."""
        return {key: getattr(self.layout, _PLANNER_NAMES.get(key, key)) for key in _LAYOUT_KEYS}


def _engine_digested(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine options as digested: without an empty environment (configs from before ``extra_env`` existed
    keep their revision and compile-cache key); with one, the environment changes both (vLLM hashes some of it)."""
    return {key: value for key, value in engine.items() if not (key == "extra_env" and not value)}


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def engine_options(plan: ServingPlan, spec: CampaignSpec) -> EngineOptions:
    """The engine options the plan was computed for, plus the spec's served name, and the catalog's vLLM recipe
    for the model and GPU family composed with the spec's extra arguments and environment (args.py says who wins).

    Raises SpecError when ``serving.extra_env`` sets a variable the rollout sets itself.
    """
    kv_cache_dtype: Literal["auto", "fp8"] = "fp8" if plan.kv_cache_dtype_bytes == 1 else "auto"
    recipe = recipe_for(plan.model) if spec.serving.recipe else None
    family = get_instance_type(plan.instance_type).gpu.family
    args, env = recipe_arguments(recipe, family=family, layout=plan.parallel, kv_cache_dtype=kv_cache_dtype)
    return EngineOptions(
        served_model_name=spec.served_model_name,
        max_model_len=plan.context_length,
        # The total over all DP ranks (the field's meaning); vllm_args hands each rank its share.
        max_num_seqs=plan.parallel.sequences_per_dp_rank * plan.parallel.data_parallel,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        extra_args=tuple(compose_extra_args(args, spec.serving.extra_args)),
        extra_env=tuple(compose_env(env, spec.serving.extra_env)),
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
    image: str | None = None,
    model_config_digest: str | None = None,
) -> RolloutConfig:
    """The configuration a campaign rolls out, from its plan, its spec and the staged weights.

    ``node_bytes`` and ``splits_experts`` come from the weights stage (the manifest's fullest node,
    and whether nodes hold different experts: ``placement.Layout.splits_experts``). ``image`` is what the
    pods pull instead of ``serving.image``: its ECR copy by digest (``capserve.core.rollout.image``).
    ``model_config_digest``: the staged config.json's (``WeightsResult.config_digest``).
    """
    return RolloutConfig(
        image=image or spec.serving.image,
        image_digest=image_digest,
        model_repo=model_repo,
        revision_sha=revision_sha,
        model_config_digest=model_config_digest,
        instance_type=plan.instance_type,
        layout=plan.parallel,
        replicas=spec.serving.replicas,
        engine=engine_options(plan, spec),
        endpoint_access=spec.serving.endpoint_access,
        compile_cache=spec.serving.compile_cache,
        model_bytes=plan.weight_bytes,
        compile_shape=plan.compile_shape,
        node_bytes=node_bytes,
        splits_experts=splits_experts,
        startup_budget_minutes=spec.serving.startup_budget_minutes,
    )
