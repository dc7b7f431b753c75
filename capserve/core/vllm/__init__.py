"""vLLM's own rules for ``vllm serve``'s arguments, one copy used twice (pure).

- ``parser``: vLLM's argument parser rebuilt from a snapshot of it (flags, converters, choices, the
  rewriting ``FlexibleArgumentParser`` does), with its cross-flag rules (``rules``);
- ``versions``: a snapshot per vLLM version, picked by the image the campaign runs.

Preflight parses the campaign's final command line with it before anything is bought
(``capserve.core.rollout.command``); the sandbox's kubelet parses a pod's with the same module when it
plays ``vllm serve`` (docs/serving.md §10).
"""
