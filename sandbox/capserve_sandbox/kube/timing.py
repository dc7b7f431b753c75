"""Cluster time in the sandbox: every Kubernetes duration divided by one factor a test sets.

A K3 startup budget is 90 minutes of probes; with ``time_scale=600`` the kubelet probes every
``periodSeconds / 600`` seconds and the budget plays out in 9 s. The same factor shrinks crash and
image-pull back-offs, Job back-offs, ``activeDeadlineSeconds``, ``progressDeadlineSeconds``,
``ttlSecondsAfterFinished``, grace periods and the sandbox's fault delays. What is not scaled: the
real work of a local process (a real vLLM still takes its minute to start). docs/sandbox-kubelet.md.
"""

from __future__ import annotations

from dataclasses import dataclass

# Never sleep less than this much wall time between two looks: keeps a 2-core box responsive.
MIN_INTERVAL_S = 0.02


@dataclass
class Timing:
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError("time_scale must be positive (1 = real time, 60 = a minute per second)")

    def wall(self, cluster_seconds: float) -> float:
        """Wall seconds for a duration in cluster seconds."""
        return max(cluster_seconds / self.time_scale, 0.0)

    def wall_interval(self, cluster_seconds: float) -> float:
        """Like ``wall`` but never below MIN_INTERVAL_S: for periods between repeated looks."""
        return max(self.wall(cluster_seconds), MIN_INTERVAL_S)
