"""What the rollout stage reports: what ran, what failed, what serves now, how it was reached (pure).

``report.json`` gets ``"rollout": {"kind", "name", "strategy", "nodes", "image", "args",
"ready_after_s", "endpoint_access", "compile_cache", "rolled_back", ...}``: the fields of the
workload that serves at the end (after a rollback: the last good one), the arguments without the
API key (the key is only ever a ``$(VLLM_API_KEY)`` reference), and one line per attempt.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.errors import PermanentError
from capserve.core.markdown import markdown_table
from capserve.core.rollout.diagnosis import Diagnosis
from capserve.core.rollout.image import ImagePull
from capserve.core.rollout.startup_log import EngineStartup
from capserve.core.rollout.strategy import Strategy

# vLLM's API server logs its version when it starts: "vLLM server version 0.32.0, serving model …", or
# with its log formatter a logo whose second line ends "version 0.32.0" (vllm 0.32
# vllm/entrypoints/serve/utils/api_utils.py, log_version_and_model); earlier releases said "vLLM API
# server version …". The sandbox kubelet's argument checker logs a line that says it is a stand-in;
# when it hands over to a real vLLM on the CPU, the real server's own line follows.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REAL = (
    re.compile(r"vLLM (?:API )?server version ([^\s,]+)(.*)$", re.MULTILINE),
    re.compile(r"█.*\bversion\s+([0-9][^\s]*)()$", re.MULTILINE),
)
_STAND_IN = re.compile(r"vLLM API server version (\S+) \(capserve sandbox stand-in\)")


def server_from_log(log: str) -> str:
    """Which server the leader pod ran, from its log: real vLLM (with its version) or the sandbox's simulation."""
    plain = _ANSI.sub("", log)
    real = [m.group(1) for rx in _REAL for m in rx.finditer(plain) if "capserve sandbox stand-in" not in m.group(2)]
    if real:
        return f"vLLM {real[-1]}"
    stand_in = _STAND_IN.findall(log)
    if stand_in:
        return (
            f"the sandbox kubelet's simulated vLLM {stand_in[-1]} (its own argument parser checks the pod's "
            "command; OpenAI-compatible answers with synthetic latencies, no model weights loaded)"
        )
    return "unknown (the leader's log names no vLLM API server)"


class Attempt(BaseModel):
    """One rollout (or rollback) the stage ran, and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=63, description="Workload applied.")
    revision: str = Field(min_length=1, max_length=16, description="Configuration revision.")
    strategy: Strategy = Field(description="How it rolled out (capserve.core.rollout.strategy).")
    rollback: bool = Field(description="This attempt brought the last good configuration back.")
    ok: bool = Field(description="It became ready (and passed its check).")
    ready_after_s: float | None = Field(None, ge=0, description="Apply to ready, seconds.")
    failure: str | None = Field(None, max_length=4000, description="What went wrong (the diagnosis).")
    trouble: str | None = Field(None, max_length=64, description="The diagnosis' kind.")


class StartupComparison(BaseModel):
    """The leader's vLLM start: the time model's figure and the phases the server's log gives (docs/timeline.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    predicted_s: float = Field(ge=0, description="Process start → listening, as predicted.")
    warm: bool = Field(description="Predicted with a warm compile cache.")
    basis: str = Field(
        "time model", max_length=200, description="The prediction's source: the time model, or a measured start."
    )
    measured: EngineStartup = Field(description="From the leader's log (capserve.core.rollout.startup_log).")

    def markdown(self) -> str:
        m = self.measured
        said = ", ".join(
            f"{label} {value:,.1f} s" for label, value in (
                ("to listening", m.to_listening_s), ("weights load", m.weights_load_s), ("model load", m.model_load_s),
                ("torch.compile", m.compile_s), ("graph capture", m.graph_capture_s),
                ("engine init", m.engine_init_s),
            ) if value is not None
        )
        kv = f"; KV cache {m.kv_cache_tokens:,} tokens" if m.kv_cache_tokens is not None else ""
        measured = said + kv if m.said_anything else "the leader's log tells none of vLLM's start lines"
        return (
            f"vLLM start: predicted {self.predicted_s:,.0f} s ({'warm' if self.warm else 'cold'} compile cache; "
            f"{self.basis}); "
            f"measured from its log: {measured}."
        )


class RolloutResult(BaseModel):
    """The rollout stage's section of the report."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(min_length=1, max_length=64, description="Kind of the serving workload.")
    name: str = Field(min_length=1, max_length=63, description="The workload serving now.")
    namespace: str = Field(min_length=1, max_length=63, description="Its namespace.")
    revision: str = Field(min_length=1, max_length=16, description="Revision serving now.")
    strategy: Strategy = Field(description="Strategy of the (last) rollout attempted.")
    nodes: int = Field(ge=1, le=4096, description="GPU nodes the serving workload occupies.")
    image: str = Field(min_length=1, max_length=400, description="Image serving now.")
    args: tuple[str, ...] = Field(description="The leader's `vllm serve` arguments (the key only as a reference).")
    ready_after_s: float | None = Field(None, ge=0, description="Apply to ready of what serves now (None: unchanged).")
    ready_at: AwareDatetime | None = Field(
        None, description="When its pods were all ready, on the block's clock (a redeploy splits its downtime there)."
    )
    startup_budget_s: int = Field(ge=1, description="Its startup probe's budget.")
    endpoint_access: str = Field(min_length=1, max_length=32, description="How the endpoint is reached: port-forward.")
    endpoint_note: str = Field(min_length=1, max_length=1000, description="How the flow reaches the endpoint.")
    server: str = Field(min_length=1, max_length=400, description="What the leader pod runs (from its log).")
    compile_cache: dict[str, Any] = Field(
        description="{'result': hit|miss|off|unknown, 'key', 'uri', 'saved_jobs', 'save': not-needed|saved|failed, "
        "'save_detail': why it failed}."
    )
    rolled_back: bool = Field(description="A failed rollout was undone: the last good configuration serves.")
    attempts: tuple[Attempt, ...] = Field(min_length=1, description="What ran, in order.")
    api_calls_while_waiting: int = Field(0, ge=0, description="Kubernetes API requests made by the ready wait.")
    image_pull: ImagePull | None = Field(
        None, description="The serving image's pull, from the kubelet's Pulled events (None: already present)."
    )
    startup: StartupComparison | None = Field(
        None, description="The start the time model predicted beside what vLLM logged (None: nothing started)."
    )

    @property
    def failed(self) -> tuple[Attempt, ...]:
        return tuple(a for a in self.attempts if not a.ok)

    def report_section(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "revision": self.revision,
            "strategy": self.strategy,
            "nodes": self.nodes,
            "image": self.image,
            "args": list(self.args),
            "ready_after_s": self.ready_after_s,
            "startup_budget_s": self.startup_budget_s,
            "endpoint_access": self.endpoint_access,
            "endpoint_note": self.endpoint_note,
            "server": self.server,
            "compile_cache": dict(self.compile_cache),
            "rolled_back": self.rolled_back,
            "attempts": [a.model_dump(mode="json") for a in self.attempts],
            "image_pull": self.image_pull.model_dump(mode="json") if self.image_pull else None,
            "startup": self.startup.model_dump(mode="json") if self.startup else None,
        }

    def markdown(self) -> str:
        ready = f"{self.ready_after_s:.1f} s" if self.ready_after_s is not None else "already serving"
        cache = self.compile_cache
        lines = [
            f"Serving now: `{self.kind}/{self.name}` (revision `{self.revision}`, {self.nodes} node(s)), "
            f"image `{self.image}`; ready after {ready} (startup budget {self.startup_budget_s} s).",
            "",
            f"Server: {self.server}.",
            "",
            f"Endpoint ({self.endpoint_access}): {self.endpoint_note}",
            "",
            f"Compile cache: **{cache.get('result')}** (key `{cache.get('key')}`, {cache.get('uri')}).",
        ]
        if cache.get("save") == "failed":
            lines += [
                "",
                f"**Warning**: the compile cache was not saved ({cache.get('save_detail')}). The server serves; "
                "the next campaign starts cold.",
            ]
        if self.image_pull is not None:
            pull = self.image_pull
            lines += [
                "",
                f"Image pull: {pull.seconds:.1f} s ({pull.including_waiting_s:.1f} s including waiting) "
                f"on pod {pull.pod}, the slowest of {pull.pulls} (kubelet Pulled events).",
            ]
        if self.startup is not None:
            lines += ["", self.startup.markdown()]
        if self.rolled_back:
            lines += ["", "**Rolled back**: the new configuration failed; the last good one serves again."]
        rows = [
            {
                "workload": a.name,
                "revision": a.revision,
                "strategy": a.strategy + (" (rollback)" if a.rollback else ""),
                "outcome": "ok" if a.ok else "FAILED",
                "ready after (s)": f"{a.ready_after_s:.1f}" if a.ready_after_s is not None else "—",
                "why": (a.failure or "")[:300].replace("|", "/"),  # a cell must not end the row
            }
            for a in self.attempts
        ]
        lines += ["", markdown_table(rows)]
        lines += ["", "`vllm serve` arguments of the leader:", "", "```", " ".join(self.args), "```"]
        return "\n".join(lines)


class RolloutFailedError(PermanentError):
    """A rollout attempt that did not become ready, with its diagnosis (the message says what and the fix)."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.describe())
        self.diagnosis = diagnosis
