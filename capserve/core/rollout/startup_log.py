"""How long each phase of a vLLM start took, read from the server's own log (pure).

The time model (``capserve.core.timeline``) predicts a start from the weights, where they live and the compile
cache; this reads what vLLM 0.32 itself logged, so the report can set the two side by side (docs/timeline.md §5).
Each pattern is the format string of a vLLM log call (paths under ``vllm/`` in the vLLM 0.32 wheel):

- ``model_executor/model_loader/default_loader.py``: "Loading weights took %.2f seconds" (every rank; the slowest
  rank decides);
- ``v1/worker/gpu_model_runner.py``: "Model loading took %s GiB memory and %.6f seconds" (GPU ranks);
- ``compilation/monitor.py``: "torch.compile took %.2f s in total"; ``v1/engine/core.py`` adds the same figure as
  "(compilation: %.2f s" to its init line;
- ``v1/worker/gpu_model_runner.py``: "Graph capturing finished in %.0f secs, took %.2f GiB";
- ``v1/engine/core.py``: "init engine (profile, create kv cache, warmup model) took %.2f s";
- ``v1/core/kv_cache_utils.py``: "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request";
- ``entrypoints/launchers/api_server/entry.py``: "Starting vLLM server on %s": the end of the start.

vLLM's log prefix is ``LEVEL MM-DD HH:MM:SS`` (no year): the start's length is the time from the first stamped line
to the "Starting vLLM server" line, across midnight or a new year if need be.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.progress import Progress

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
_PATTERNS = {
    "weights_load_s": re.compile(r"Loading weights took " + _NUMBER + r" seconds"),
    "model_load_s": re.compile(r"Model loading took [0-9.]+ GiB memory and " + _NUMBER + r" seconds"),
    "compile_s": re.compile(r"torch\.compile took " + _NUMBER + r" s in total|\(compilation: " + _NUMBER + r" s"),
    "graph_capture_s": re.compile(r"Graph capturing finished in " + _NUMBER + r" secs"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUMBER + r" s"),
    "kv_cache_tokens": re.compile(r"KV cache size: " + _NUMBER + r" tokens"),
}
_LISTENING = "Starting vLLM server on"


class EngineStartup(BaseModel):
    """What vLLM logged about its start; None where the log (or its tail) did not say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to_listening_s: float | None = Field(None, ge=0, description="First stamped log line to 'Starting vLLM server'.")
    weights_load_s: float | None = Field(None, ge=0, description="Loading weights took (the slowest rank).")
    model_load_s: float | None = Field(None, ge=0, description="Model loading took (GPU ranks: weights and setup).")
    compile_s: float | None = Field(None, ge=0, description="torch.compile in total (0 or None: not compiled).")
    graph_capture_s: float | None = Field(None, ge=0, description="CUDA-graph capture.")
    engine_init_s: float | None = Field(None, ge=0, description="Profile, KV cache creation and warm-up.")
    kv_cache_tokens: int | None = Field(None, ge=0, description="Tokens the KV cache holds.")

    @property
    def said_anything(self) -> bool:
        return any(value is not None for value in self.model_dump().values())


def engine_startup_from_log(log: str) -> EngineStartup:
    """The phases of the start the log tells, the slowest rank's where several ranks log the same phase."""
    plain = _ANSI.sub("", log)
    found: dict[str, float] = {}
    for name, pattern in _PATTERNS.items():
        values = [float(next(g for g in match.groups() if g).replace(",", "")) for match in pattern.finditer(plain)]
        if values:
            found[name] = max(values)
    kv_tokens = found.pop("kv_cache_tokens", None)
    return EngineStartup(
        **found, kv_cache_tokens=int(kv_tokens) if kv_tokens is not None else None,
        to_listening_s=_phases_entered(plain).get("listening"),
    )


# The phase a vLLM start is in, from the last milestone its log announced: each milestone line is written when a
# phase ends, so the phase under way is the one after it (the order vLLM 0.32 runs them in).
_MILESTONES = (
    ("listening", re.compile(re.escape(_LISTENING))),
    ("starting the API server", _PATTERNS["engine_init_s"]),
    ("warming up the engine (KV cache, profile)", _PATTERNS["graph_capture_s"]),
    ("capturing CUDA graphs", _PATTERNS["compile_s"]),
    ("compiling (torch.compile)", _PATTERNS["weights_load_s"]),
)


def startup_phase(log: str) -> str:
    """What the start is doing now, e.g. ``loading weights`` until vLLM logs "Loading weights took"."""
    plain = _ANSI.sub("", log)
    for phase, pattern in _MILESTONES:  # latest milestone first
        if pattern.search(plain):
            return phase
    return "loading weights"


def startup_progress(log: str, *, running_s: float, expected_s: float | None) -> Progress:
    """``vLLM startup: loading weights, 23 of ~75 min expected``: the phase the log says, for how long the server
    has run (the block's seconds since its container started) against the time model's expectation."""
    return Progress("vLLM startup", detail=startup_phase(log), elapsed_s=max(running_s, 0.0), expected_s=expected_s)


def startup_milestones(log: str, *, expected_s: float | None) -> list[Progress]:
    """Each phase the log shows the start entering, at the block's seconds it entered it (from the first stamped
    line), in order: every phase of a start is told, however seldom the log is read (a phase may pass between
    two readings)."""
    entered = _phases_entered(_ANSI.sub("", log))
    return [Progress("vLLM startup", detail=phase, elapsed_s=s, expected_s=expected_s) for phase, s in entered.items()]


def _phases_entered(plain: str) -> dict[str, float]:
    """Seconds from the first stamped line to the line of each milestone, in the order they appear."""
    first: datetime | None = None
    at: datetime | None = None
    seen: dict[str, float] = {}
    for line in plain.splitlines():
        stamp = _STAMP.search(line)
        if stamp is not None:
            month, day, hour, minute, second = (int(part) for part in stamp.groups())
            try:
                # In a leap year, so that 02-29 is a date; only differences count, a new year is handled below.
                at = datetime(2000, month, day, hour, minute, second)
            except ValueError:
                continue
            if first is None:
                first = at
                seen["loading weights"] = 0.0  # what a start does first, until its first milestone
        if first is None or at is None:
            continue
        for phase, pattern in _MILESTONES:
            if phase not in seen and pattern.search(line):
                elapsed = at - first
                if elapsed < timedelta(0):  # across a new year: 2000 has 366 days
                    elapsed += timedelta(days=366)
                seen[phase] = elapsed.total_seconds()
    return seen
