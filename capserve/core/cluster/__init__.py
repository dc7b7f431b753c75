"""Cluster bring-up, pure: names, request builders, settings, deadline rule, result, GPU readiness.

Nothing here talks to AWS or Kubernetes; ``capserve.tasks.cluster`` sends what these modules build.
"""
