"""Talking to the cluster for the rollout: the API-key Secret, apply, watch-wait with diagnosis,
delete, the Services' switch, compile-cache checks and saves, and the local port-forward."""
