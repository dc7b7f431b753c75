"""Evaluation of an OpenAI-compatible endpoint: spec, metric math, scoring, gates and the result (pure)."""
