"""Weights stage, pure part: file listing, per-node plan, re-shard plan, manifest, staging Job."""
