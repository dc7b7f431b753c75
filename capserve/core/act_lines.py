"""One line per act of a campaign, as ``capserve up`` shows it and the run's log keeps it (pure).

Each lifecycle event (``capserve.core.events``) and each step the console must not pass over in silence (the
preparation before the block, the drain, each phase of the teardown) reads as one line with the facts that matter:
``bought cr-0123 in us-east-2a for $2,832: 1 × p6-b300.48xlarge, block 12-06 11:30 → 12-07 11:30 UTC``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import JsonValue

from capserve.core.cluster.result import PreparedCluster
from capserve.core.drain import DrainResult
from capserve.core.events import CapserveEvent, EventName


def act_line(event: CapserveEvent) -> str | None:
    """The event as a person reads it; None for an event that tells a person nothing new."""
    p = event.payload
    name = event.event
    if name in (EventName.CAPACITY_PURCHASED, EventName.CAPACITY_ADOPTED):
        where = p.get("availability_zone") or p.get("region")
        what = f"{p.get('instance_count')} × {p.get('instance_type')}"
        block = f"block {_when(p.get('start'))} → {_when(p.get('end'))} UTC"
        if name == EventName.CAPACITY_ADOPTED:
            return f"adopted {p.get('reservation_id')} in {where} (already paid for): {what}, {block}"
        return f"bought {p.get('reservation_id')} in {where} for {_usd(p.get('upfront_fee'))}: {what}, {block}"
    if name == EventName.CLUSTER_READY:
        return (f"cluster {p.get('cluster')} ready: {p.get('nodes_ready')} GPU node(s), "
                f"{p.get('gpus_allocatable')} GPUs allocatable")
    if name == EventName.WEIGHTS_STAGED:
        verified = "verified" if p.get("verified") else "not verified"
        return (f"weights staged: {p.get('repo')}@{str(p.get('revision'))[:12]}, {p.get('files')} files, "
                f"{_gib(p.get('bytes_total'))}, {verified}")
    if name == EventName.ROLLOUT_READY:
        return f"serving revision {str(p.get('revision'))[:12]} ({p.get('strategy') or 'rollout'} ready)"
    if name == EventName.ROLLOUT_FAILED:
        return f"rollout of revision {str(p.get('revision'))[:12]} failed: {p.get('detail') or 'see the run log'}"
    if name == EventName.ROLLOUT_ROLLED_BACK:
        return (f"rolled back revision {str(p.get('revision'))[:12]}: serving "
                f"{str(p.get('rolled_back_to') or 'what served before')[:12]} again")
    if name in (EventName.EVALUATION_PASSED, EventName.EVALUATION_FAILED, EventName.EVALUATION_INVALID):
        failed = p.get("failed_gates") or []
        gates = f" (failed gates: {', '.join(str(g) for g in failed)})" if isinstance(failed, list) and failed else ""
        return f"evaluation of {p.get('model')}: {str(p.get('verdict')).upper()}{gates}"
    if name == EventName.REVISION_PUBLISHED:
        return f"the Hub published a new revision of {p.get('repo')}: {str(p.get('revision'))[:12]}"
    if name in (EventName.TEARDOWN_DONE, EventName.TEARDOWN_INCOMPLETE):
        listed = "would delete" if p.get("dry_run") else "deleted"
        text = f"teardown ({p.get('reason')}) {'done' if name == EventName.TEARDOWN_DONE else 'INCOMPLETE'}: "
        text += f"{p.get('deleted')} {listed}, {p.get('kept')} kept"
        remaining = p.get("remaining") or []
        if isinstance(remaining, list) and remaining:
            text += f"; still there: {'; '.join(str(r) for r in remaining)}"
        return text
    return None


def prepared_line(prepared: PreparedCluster) -> str:
    """``prepared cluster capserve-k3-demo 38 min before the block: 14 resources created (…)``."""
    ahead = round(prepared.ahead_of_block_s / 60)
    when = f"{ahead} min before the block" if ahead >= 0 else f"{-ahead} min AFTER the block started"
    return (f"prepared cluster {prepared.cluster} {when}: {len(prepared.created)} resources created (network, "
            "control plane, system nodes, GPU node group at size 0)")


def drain_line(result: DrainResult) -> str:
    """``drained: 1 Service removed, 1 workload scaled to 0`` (or why nothing was)."""
    if result.note:
        return f"drain: nothing drained ({result.note})"
    return (f"drained: {len(result.services_removed)} Service(s) removed, {len(result.scaled_to_zero)} "
            "workload(s) scaled to 0 (no new requests; AWS stops the instances 30 min before the end)")


def teardown_step_line(phase: str, number: int, of: int, deleted: list[str], gone: int, remaining: int) -> str:
    """``teardown 3/10 cluster: deleted eks-cluster/capserve-k3-demo``."""
    text = f"teardown {number}/{of} {phase}: "
    text += f"deleted {', '.join(deleted)}" if deleted else "nothing to delete"
    if gone:
        text += f" ({gone} already gone)"
    if remaining:
        text += f"; {remaining} STILL THERE"
    return text


def _when(value: JsonValue) -> str:
    try:
        return datetime.fromisoformat(str(value)).astimezone(UTC).strftime("%m-%d %H:%M")
    except ValueError:
        return str(value)


def _usd(value: JsonValue) -> str:
    return f"${value:,.0f}" if isinstance(value, int | float) else "an unknown fee"


def _gib(value: JsonValue) -> str:
    if not isinstance(value, int | float):
        return "? bytes"
    return f"{value / 2**30:,.1f} GiB" if value >= 2**30 else f"{value / 2**20:,.1f} MiB"
