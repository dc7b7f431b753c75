"""Does the pinned vLLM have a kernel for this checkpoint's formats on this GPU? (docs/planner.md)

Read in vLLM 0.32's source (the version this project pins for its CPU test venv; the K3 image is a
nightly of the same line). Three answers:

- ``supported``: a native kernel exists for the GPU's architecture;
- ``unverified``: vLLM runs it through a fallback (Marlin weight-only kernels dequantize to bf16),
  which loads and serves but is neither what the checkpoint was trained for nor validated here;
- ``unsupported``: vLLM refuses the format below a minimum compute capability.

A plan on an ``unverified`` GPU still fits, flagged; an ``unsupported`` one is refused with the reason.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog.hardware import GpuType
from capserve.core.catalog.models import ModelEntry

KernelStatus = Literal["supported", "unverified", "unsupported"]

VLLM_VERSION = "0.32"


class KernelVerdict(BaseModel):
    """The kernel answer for one model on one GPU, with why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: KernelStatus = Field(description="supported, unverified (fallback kernel) or unsupported.")
    note: str = Field(description="Which kernel path vLLM takes, or why it refuses.")


def kernel_support(model: ModelEntry, gpu: GpuType) -> KernelVerdict:
    """The weakest verdict over the model's weight formats on ``gpu``."""
    q = model.quantization
    verdicts = [_experts(q.routed_experts, q.activations, gpu), _dense(q.dense, gpu)]
    order: dict[KernelStatus, int] = {"unsupported": 0, "unverified": 1, "supported": 2}
    worst = min(verdicts, key=lambda v: order[v.status])
    if worst.status == "supported":
        note = f"native kernels on {gpu.name} (sm_{gpu.sm}) in vLLM {VLLM_VERSION}"
        return KernelVerdict(status="supported", note=note)
    return worst


def _experts(weights: str, activations: str, gpu: GpuType) -> KernelVerdict:
    sm, name = gpu.sm, f"{gpu.name} (sm_{gpu.sm})"
    if weights == "mxfp4":
        if sm < 80:  # Mxfp4Config and the compressed-tensors MXFP4 scheme: get_min_capability() == 80
            return _no(f"vLLM {VLLM_VERSION} needs sm_80 or newer for MXFP4 weights; {name} is older")
        if sm >= 100:  # CUTLASS / FlashInfer block-scaled FP4 MoE kernels (SM100 family)
            return _yes()
        if sm >= 90 and activations == "bf16":  # gpt-oss path: OpenAI Triton MoE kernels run on Hopper
            return _yes()
        what = "MXFP8 activations" if activations == "mxfp8" else f"{activations} activations"
        return KernelVerdict(
            status="unverified",
            note=f"MXFP4 experts with {what} have no native kernel on {name} in vLLM {VLLM_VERSION}: "
            "it falls back to Marlin weight-only kernels (bf16 activations), which serve but are not what "
            "the checkpoint was trained for; validate quality before relying on it, or use a Blackwell GPU",
        )
    if weights == "fp8":
        if sm < 75:  # Fp8Config.get_min_capability() == 75
            return _no(f"vLLM {VLLM_VERSION} needs sm_75 or newer for FP8 weights; {name} is older")
        if sm >= 89:
            return _yes()
        return KernelVerdict(
            status="unverified",
            note=f"FP8 weights on {name} run through Marlin weight-only kernels in vLLM {VLLM_VERSION} "
            "(no FP8 tensor cores before sm_89)",
        )
    return _bf16(gpu)


def _dense(fmt: str, gpu: GpuType) -> KernelVerdict:
    return _experts(fmt, "fp8", gpu) if fmt == "fp8" else _bf16(gpu)


def _bf16(gpu: GpuType) -> KernelVerdict:
    if gpu.sm < 80:  # bfloat16 needs compute capability 8.0 (vLLM refuses it on older GPUs)
        return _no(f"bfloat16 weights need sm_80 or newer; {gpu.name} (sm_{gpu.sm}) is older")
    return _yes()


def _yes() -> KernelVerdict:
    return KernelVerdict(status="supported", note="native kernel")


def _no(note: str) -> KernelVerdict:
    return KernelVerdict(status="unsupported", note=note)
