"""Which model families think before they answer, and how vLLM serves that (docs/evaluation.md §6.4).

Keyed by config.json ``model_type``, so a model read from its own config.json knows it as well as a
catalog entry does. A family whose checkpoints differ (Kimi K2: Instruct answers directly, K2-Thinking
thinks, both ``kimi_k2``) is not listed: nothing in config.json tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from capserve.core.catalog.models import Thinking

# vLLM 0.32 vllm/reasoning/kimi_k3_reasoning_parser.py: thinking is on unless the request's
# chat_template_kwargs sets `thinking` (or `enable_thinking`) to false, which makes it instruct mode.
# That is vLLM's parser; the model card's own word on the switch was not read, so the quality check
# leaves room for the thinking by default rather than turning it off.
K3_THINKING = Thinking(
    reasoning_parser="kimi_k3",
    off_switch="thinking",
    source="vLLM 0.32 vllm/reasoning/kimi_k3_reasoning_parser.py (chat_template_kwargs thinking=false: instruct "
    "mode); the vLLM recipe serves K3 with --reasoning-parser kimi_k3",
)

# The harmony format always reasons (an analysis channel before the final one); reasoning_effort
# shortens it but nothing turns it off.
GPT_OSS_THINKING = Thinking(
    reasoning_parser="openai_gptoss",
    source="vLLM 0.32 vllm/reasoning/gptoss_reasoning_parser.py (harmony analysis channel before the final one)",
)

THINKING_BY_MODEL_TYPE: Mapping[str, Thinking] = MappingProxyType(
    {"kimi_k3": K3_THINKING, "gpt_oss": GPT_OSS_THINKING}
)
