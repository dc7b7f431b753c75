"""vLLM's own rules for ``vllm serve``'s arguments, one copy used twice (pure).

- ``parser``: vLLM's argument parser rebuilt from a snapshot of it (flags, converters, choices, the
  rewriting ``FlexibleArgumentParser`` does), with its cross-flag rules (``rules``);
- ``versions``: a snapshot per vLLM version, picked by the image the campaign runs.

Preflight parses the campaign's final command line with it before anything is bought
(``capserve.core.rollout.command``); the sandbox's kubelet parses a pod's with the same module when it
plays ``vllm serve`` (docs/serving.md §10).
"""

from capserve.core.vllm.parser import (
    ServeArgs,
    VllmArgsError,
    is_option,
    long_flag,
    parse_serve_args,
    serve_argv,
    snapshot,
)
from capserve.core.vllm.rules import VllmStartupError, rules, tool_choice_auto_refusal
from capserve.core.vllm.versions import ImageVersion, image_version, newest_version, versions

__all__ = [
    "ImageVersion",
    "ServeArgs",
    "VllmArgsError",
    "VllmStartupError",
    "image_version",
    "is_option",
    "long_flag",
    "newest_version",
    "parse_serve_args",
    "rules",
    "serve_argv",
    "snapshot",
    "tool_choice_auto_refusal",
    "versions",
]
