"""vLLM's start as the sandbox plays it on a simulated block (docs/sandbox-kubelet.md, "A played start").

The sandbox serves a checkpoint of a few MB that stands for the real model (the demo's tiny K3 stands for
the catalog's Kimi K3). Its stand-in server is up in a second, so on a simulated block it would show a
two-minute cold start where a p6-b300 takes over an hour. When the sandbox is told what the checkpoint
stands for (``StandsFor``), a vLLM container instead spends the time model's phases
(``capserve.core.timeline.vllm_start_phases``) on the block's clock before its server listens:

- the bytes this node loads are the stand-in's bytes on the node, scaled to the model it stands for
  (``model.safetensors.index.json``'s ``total_size`` is the whole stand-in checkpoint);
- they are read at the rate of where they are on the node's instance type (its NVMe array; FSx when the
  weights come from a persistent volume claim);
- compile is warm when vLLM's compile cache already holds a compile of this server, as vLLM keeps it:
  ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_0_0/`` (``vllm/compilation/backends.py``); a cold start
  leaves one there, which the rollout's cache Job saves and a later pod's init container restores. The hash
  covers what vLLM's covers (``server_key``): its version, the model path, the model's config.json, the
  parallel sizes; not the weights, so a new revision at the same path with the same config is warm;
- each phase ends with the line vLLM 0.32 logs for it, stamped with the block's clock in vLLM's own format,
  so the rollout reads the measured start from the log as it does on a GPU.

The clock skips through each phase (``SandboxClock.skip_to``): nothing real runs meanwhile, and the demo's
wall time does not grow with the modelled hour.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from uuid import uuid4

from capserve.core.catalog import get_instance_type
from capserve.core.errors import UnknownCatalogEntryError
from capserve.core.rollout.cache import compile_config_digest
from capserve.core.timeline import (
    CompileShape,
    Phase,
    Storage,
    TimeFigures,
    cudagraph_capture_sizes,
    vllm_start_phases,
    weight_read_bytes_per_s,
)
from capserve_sandbox.clock import CLOCK

INDEX = "model.safetensors.index.json"
COMPILE_CACHE = "torch_compile_cache"
_POLL_S = 0.02


@dataclass(frozen=True)
class StandsFor:
    """The model the sandbox's small checkpoint stands for: its whole bytes, its compile shape (the layout's part is
    the served engine's: ``served_shape``), and the figures of the time model."""

    model_bytes: int
    shape: CompileShape = field(default_factory=CompileShape)
    figures: TimeFigures = field(default_factory=TimeFigures)


def served_shape(
    shape: CompileShape, *, instance_type: str | None, max_num_seqs: int | None, autotune: bool
) -> CompileShape:
    """The shape as the pod's engine serves it: its --max-num-seqs sets the captured sizes, and FlashInfer's MoE
    autotune runs only on Blackwell and when the arguments leave it on (vLLM's default)."""
    try:
        family = get_instance_type(instance_type).gpu.family if instance_type else None
    except UnknownCatalogEntryError:
        family = None
    sizes = cudagraph_capture_sizes(max_num_seqs) if max_num_seqs else shape.capture_sizes
    on = shape.flashinfer_moe_autotune and autotune and family == "blackwell"
    return shape.model_copy(update={"capture_sizes": sizes, "flashinfer_moe_autotune": on})


def node_bytes(host_model: Path, stands_for: StandsFor) -> int:
    """The bytes this node loads, scaled from the stand-in's files here to the model it stands for."""
    try:
        index = json.loads((host_model / INDEX).read_text())
        whole = int(index["metadata"]["total_size"])
        files = set(index["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError):
        return stands_for.model_bytes  # a single-file checkpoint: the node holds all of it
    here = sum((host_model / name).stat().st_size for name in files if (host_model / name).is_file())
    share = min(here / whole, 1.0) if whole > 0 else 1.0
    return round(stands_for.model_bytes * share)


def server_key(*, model: str, sizes: object, vllm_version: str, host_model: Path) -> str:
    """What vLLM's compile-cache hash covers, as far as the stand-in tells servers apart: the vLLM version, the
    ``--model`` path string, the model's config.json as vLLM hashes it (``ModelConfig.compute_hash`` hashes the
    loaded config: ``compile_config_digest``) and the parallel sizes (``ParallelConfig.compute_hash``); never the
    weight files (vllm/config/vllm.py ``VllmConfig.compute_hash``, vllm/compilation/backends.py; docs/serving.md §4)."""
    try:
        config = json.loads((host_model / "config.json").read_text(encoding="utf-8"))
        digest = compile_config_digest(config) if isinstance(config, dict) else "not a mapping"
    except (OSError, ValueError):
        digest = "no config.json"
    return json.dumps(
        {"vllm": vllm_version, "model": model, "config": digest, "sizes": sizes}, sort_keys=True, default=str
    )


def compile_cache_dir(cache_root: Path, server_key: str) -> Path:
    """Where vLLM keeps this server's compiled graphs for rank 0 (``vllm/compilation/backends.py``)."""
    digest = hashlib.sha256(server_key.encode()).hexdigest()[:10]
    return cache_root / COMPILE_CACHE / digest / "rank_0_0"


def is_warm(cache_root: Path | None, server_key: str) -> bool:
    if cache_root is None:
        return False
    found = compile_cache_dir(cache_root, server_key)
    return found.is_dir() and any(found.iterdir())


def leave_compiled(cache_root: Path | None, server_key: str) -> None:
    """What a cold compile leaves behind: this server's entry in the compile cache."""
    if cache_root is None:
        return
    entry = compile_cache_dir(cache_root, server_key)
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "vllm_compile_cache.py").write_text(f"# compiled for {server_key}\n")


def vllm_stamp(at: datetime) -> str:
    """vLLM's log prefix time: ``MM-DD HH:MM:SS`` (``vllm/logger.py``, datefmt ``%m-%d %H:%M:%S``)."""
    return at.strftime("%m-%d %H:%M:%S")


def vllm_line(source: str, message: str, at: datetime) -> str:
    """One INFO line as vLLM logs it: level, time, [file:line], message (``vllm/logger.py``)."""
    return f"INFO {vllm_stamp(at)} [{source}] {message}"


def engine_line(model: str, note: str = "") -> tuple[str, str]:
    """vLLM's first engine line (``v1/engine/core.py``), where the measured start begins."""
    return "core.py:133", f"Initializing a V1 LLM engine with config: model='{model}'{note}"


def listening_line(port: int) -> tuple[str, str]:
    """vLLM's API server, listening (``entrypoints/launchers/api_server/entry.py``), where the start ends."""
    return "entry.py:140", f"Starting vLLM server on http://0.0.0.0:{port}"


def phase_lines(phase: Phase, *, warm: bool, memory_gib: float) -> list[tuple[str, str]]:
    """(vLLM source, message) of what vLLM 0.32 logs when ``phase`` ends (capserve.core.rollout.startup_log)."""
    seconds = phase.seconds
    if phase.name == "weight load":
        return [
            ("default_loader.py:501", f"Loading weights took {seconds:.2f} seconds"),
            ("gpu_model_runner.py:5150", f"Model loading took {memory_gib:.1f} GiB memory and {seconds:.6f} seconds"),
        ]
    if phase.name == "compile/autotune":
        source = "Directly load the compiled graph(s) from the cache" if warm else "Compiling a graph for dynamic shape"
        return [("backends.py:300", source), ("monitor.py:20", f"torch.compile took {seconds:.2f} s in total")]
    if phase.name == "CUDA-graph capture":
        return [("gpu_model_runner.py:6582", f"Graph capturing finished in {seconds:.0f} secs, took 0.00 GiB")]
    return []


@dataclass
class PlayedStart:
    """One vLLM container's start on the block's clock: ``play`` returns when its server may listen."""

    phases: list[Phase]
    warm: bool
    memory_gib: float
    write: Callable[[str], None]  # the container's log
    now: Callable[[], datetime] = CLOCK.now
    token: str = field(default_factory=lambda: f"vllm-start-{uuid4().hex}")

    @property
    def seconds(self) -> float:
        return sum(phase.seconds for phase in self.phases)

    def _log(self, source: str, message: str) -> None:
        self.write(vllm_line(source, message, self.now()))

    async def play(self, model: str) -> None:
        cache = "warm" if self.warm else "cold"
        self._log(*engine_line(model, f" (sandbox: {cache} cache)"))
        engine = 0.0
        try:
            for phase in self.phases:
                await self._elapse(phase.seconds)
                if phase.name in ("compile/autotune", "CUDA-graph capture"):
                    engine += phase.seconds
                for source, message in phase_lines(phase, warm=self.warm, memory_gib=self.memory_gib):
                    self._log(source, message)
            compile_s = next((p.seconds for p in self.phases if p.name == "compile/autotune"), 0.0)
            said = f"took {engine:.2f} s (compilation: {compile_s:.2f} s)"
            self._log("core.py:396", f"init engine (profile, create kv cache, warmup model) {said}")
        except BaseException:
            CLOCK.skipped(self.token)
            raise
        # The server process comes up in wall time now: the clock holds until it listens (``done``).
        CLOCK.held_by(self.token)

    def listening(self, port: int) -> None:
        self._log(*listening_line(port))

    def done(self) -> None:
        """The server listens (or never will): the clock no longer waits for it."""
        CLOCK.skipped(self.token)

    async def _elapse(self, seconds: float) -> None:
        until = self.now() + timedelta(seconds=seconds)
        CLOCK.skip_to(self.token, until)
        while self.now() < until:
            await asyncio.sleep(_POLL_S)


def played_start(
    stands_for: StandsFor,
    *,
    host_model: Path,
    cache_root: Path | None,
    server_key: str,
    instance_type: str | None,
    storage: Storage,
    nodes: int,
    write: Callable[[str], None],
    max_num_seqs: int | None = None,
    autotune: bool = True,
) -> PlayedStart:
    """The start a vLLM container of this node plays (cold or warm by its compile cache); ``max_num_seqs`` and
    ``autotune``: what the pod's arguments say (``served_shape``)."""
    figures = stands_for.figures
    loaded = node_bytes(host_model, stands_for)
    warm = is_warm(cache_root, server_key)
    read = weight_read_bytes_per_s(instance_type, storage, nodes=nodes, figures=figures)
    shape = served_shape(stands_for.shape, instance_type=instance_type, max_num_seqs=max_num_seqs, autotune=autotune)
    phases = vllm_start_phases(shape, loaded, warm=warm, read_bytes_per_s=read, figures=figures)
    memory_gib = loaded / 2**30
    return PlayedStart(phases=phases, warm=warm, memory_gib=memory_gib, write=write)


def weights_storage(pod: Mapping[str, object], model_path: str) -> Storage:
    """Where the pod's weights are: FSx when the volume under the model path is a persistent volume claim."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)  # noqa: S101 - narrows the type for mypy
    claims = {
        str(volume.get("name"))
        for volume in spec.get("volumes") or []
        if isinstance(volume, dict) and volume.get("persistentVolumeClaim")
    }
    for container in spec.get("containers") or []:
        for mount in container.get("volumeMounts") or [] if isinstance(container, dict) else []:
            if mount.get("name") in claims and model_path.startswith(str(mount.get("mountPath"))):
                return "fsx"
    return "nvme"
