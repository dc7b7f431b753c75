"""Choose among evaluated layouts by the objective, and say why every other one lost or does not fit.

Fewest nodes always comes first (nodes are what a reservation costs). Among layouts on as few
nodes, the objective decides (docs/planner.md, 'Choosing'):

- ``kv_headroom``: the most tokens one engine (DP rank) can keep in its KV cache: the longest a
  sequence may grow and the most slack against the estimates in the reserve;
- ``throughput``: the most attention batches running side by side (replicas x DP ranks), a proxy for
  decode throughput that ignores the cost of expert all-to-all over the network; then smaller TP.

Ties go to the smaller replica, then to the layout without EP, then by name, so the answer never
depends on enumeration order.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.planner.evaluate import Candidate
from capserve.core.planner.settings import Objective

Key = tuple[int | str | bool, ...]


class Alternative(BaseModel):
    """A layout that was weighed and not chosen: the ``alternatives`` rows of ``capserve plan``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layout: str = Field(description="Layout name.")
    nodes: int = Field(ge=1, description="Nodes one replica needs.")
    fits: bool = Field(description="Whether it would hold the model at the requested context and concurrency.")
    weight_bytes_per_gpu: int = Field(ge=0, description="Weights on its fullest GPU.")
    max_tokens_in_kv: int | None = Field(description="Tokens one replica's KV cache holds (None: no per-token KV).")
    tokens_per_dp_rank: int | None = Field(description="Tokens one engine (DP rank) holds: the kv_headroom measure.")
    reason: str = Field(description="Why it lost to the chosen layout, or why it does not fit.")


def streams(c: Candidate) -> int:
    """Attention batches the planned nodes run side by side."""
    return c.replicas * c.data_parallel


def objective_key(c: Candidate, objective: Objective) -> Key:
    """What the objective compares (smaller is better), before the tiebreaks."""
    if objective == "throughput":
        return (c.nodes, -streams(c), c.tensor_parallel, -c.headroom)
    return (c.nodes, -c.headroom)


def rank_key(c: Candidate, objective: Objective) -> Key:
    """Sort key of a fitting candidate: the objective, then smaller replica, no EP, name."""
    return (*objective_key(c, objective), c.gpus_per_replica, c.enable_expert_parallel, c.layout)


def _shortfall_key(c: Candidate) -> Key:
    """Sort key of a candidate that does not fit: fewest nodes, then closest to fitting."""
    return (c.nodes, -c.kv_budget_bytes_per_gpu, c.layout)


def rank(candidates: Sequence[Candidate], objective: Objective) -> list[Candidate]:
    """Fitting candidates best first, then the rest from the closest to fitting."""
    fitting = sorted((c for c in candidates if c.fits), key=lambda c: rank_key(c, objective))
    others = sorted((c for c in candidates if not c.fits), key=_shortfall_key)
    return fitting + others


def measure(c: Candidate, objective: Objective) -> str:
    """The objective's measure of one candidate, in words."""
    if objective == "throughput":
        return f"{streams(c)} attention batch(es) side by side at TP {c.tensor_parallel}"
    if c.tokens_per_dp_rank is None:
        return f"{c.kv_budget_bytes_per_gpu:,} B of state per GPU"
    return f"{c.tokens_per_dp_rank:,} KV tokens per engine"


def why_chosen(best: Candidate, objective: Objective) -> str:
    label = "most KV headroom" if objective == "kv_headroom" else "throughput proxy"
    return f"chosen: fewest nodes ({best.nodes}), then {label}: {measure(best, objective)}. {best.reason}"


def why_lost(c: Candidate, best: Candidate, objective: Objective) -> str:
    if not c.fits:
        return c.reason
    if c.nodes > best.nodes:
        return f"fits, but needs {c.nodes} node(s); {best.layout} needs {best.nodes}"
    if objective_key(c, objective) == objective_key(best, objective):
        return f"fits, ties with {best.layout} on {measure(c, objective)}; ranked after it (smaller replica, no EP)"
    return f"fits, but {measure(c, objective)} against {measure(best, objective)} for {best.layout}"


def alternatives(ranked: Sequence[Candidate], best: Candidate, objective: Objective) -> list[Alternative]:
    """Every candidate but ``best``, in ranked order, with the reason it was not chosen."""
    return [
        Alternative(
            layout=c.layout,
            nodes=c.nodes,
            fits=c.fits,
            weight_bytes_per_gpu=c.weight_bytes_per_gpu,
            max_tokens_in_kv=c.max_tokens_in_kv,
            tokens_per_dp_rank=c.tokens_per_dp_rank,
            reason=why_lost(c, best, objective),
        )
        for c in ranked
        if c is not best
    ]
