"""The starts vLLM measured, kept per server shape, so that the next start of that shape is predicted from them.

How long vLLM takes from process start to listening depends on the image (vLLM and its kernels), the model's
bytes and architecture, the instance type (its disks and GPUs), the layout and where the weights are read from,
and on whether the compile cache was warm; a new revision of the same model (a redeploy) changes none of
those. The time model (``capserve.core.timeline``) is a prediction from figures measured elsewhere; a start
measured on this shape is a better one. So each start's measured time (from vLLM's own log,
``capserve.core.rollout.startup_log``) is kept in S3 beside the compile caches, the latest cold and the latest
warm, and a later rollout of the same shape takes its expected start, and so its startup budget, from there.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.rollout.config import RolloutConfig
from capserve.core.weights.manifest import s3_base

HISTORY_DIR = "start-history"


class MeasuredStart(BaseModel):
    """One start of the shape, as vLLM's log measured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to_listening_s: float = Field(ge=0, le=7 * 24 * 3600, description="Process start → listening, from the log.")
    measured_at: AwareDatetime = Field(description="When the server became ready (the campaign's clock).")
    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign whose rollout measured it.")
    revision_sha: str = Field(min_length=1, max_length=64, description="The model revision it served.")

    def basis(self, *, warm: bool) -> str:
        """How the report names a prediction taken from this start."""
        return (
            f"measured {'warm' if warm else 'cold'} start of campaign {self.campaign_id} on "
            f"{self.measured_at:%Y-%m-%d %H:%M} UTC"
        )


class StartHistory(BaseModel):
    """The latest measured cold and warm start of one server shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cold: MeasuredStart | None = Field(None, description="The latest start with an empty compile cache.")
    warm: MeasuredStart | None = Field(None, description="The latest start that found its compile cache.")

    def for_start(self, *, warm: bool) -> MeasuredStart | None:
        return self.warm if warm else self.cold

    def with_start(self, start: MeasuredStart, *, warm: bool) -> StartHistory:
        return self.model_copy(update={"warm" if warm else "cold": start})


def shape_key(config: RolloutConfig, node_target: str) -> str:
    """What a start's time depends on, digested: image, model (not its revision), instance type, layout, replicas'
    nodes and where the weights are read from. The engine's lengths and memory settings change compile and
    KV-cache setup, so they count too."""
    parts = {
        "image": config.pinned_digest or config.image,
        "model": config.model_repo,
        "model_bytes": config.model_bytes,
        "instance_type": config.instance_type,
        "layout": config.layout.model_dump(mode="json"),
        "engine": config.engine.model_dump(mode="json", exclude={"served_model_name"}),
        "node_target": node_target,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def history_uri(bucket: str, prefix: str, key: str) -> str:
    """``s3://<bucket>/<prefix>/start-history/<key>.json``: beside the compile caches."""
    return f"s3://{bucket}/{s3_base(prefix, HISTORY_DIR, key)}.json"
