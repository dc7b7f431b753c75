"""Faults a test asks the sandbox's kubelet to inject, matched by pod name and image (shell-style patterns).

- ``image-pull``: the pull fails (``ErrImagePull``, then ``ImagePullBackOff`` with back-off);
- ``crash-loop``: the container exits 1 after ``seconds`` (then ``CrashLoopBackOff``);
- ``oom``: the container is killed after ``seconds`` with exit code 137, reason ``OOMKilled``;
- ``slow-start``: the container's server listens only after ``seconds`` (probes see connection refused).
- ``no-efa-plugin``: the vLLM image lacks NCCL's aws-ofi-nccl plugin, so NCCL falls back to its socket
  transport between nodes even with EFA devices and ``FI_PROVIDER=efa`` (whether the stock vLLM image
  ships the plugin is not documented; docs/serving.md §5.2).

``seconds`` are cluster seconds (divided by the time scale); ``times`` limits a fault to the first
N starts of each matching container (then it runs normally), e.g. one crash that a group recreation heals.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from enum import StrEnum


class FaultKind(StrEnum):
    IMAGE_PULL = "image-pull"
    CRASH_LOOP = "crash-loop"
    OOM = "oom"
    SLOW_START = "slow-start"
    NO_EFA_PLUGIN = "no-efa-plugin"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    pod: str = "*"
    image: str = "*"
    container: str = "*"
    seconds: float = 0.0
    times: int | None = None

    def matches(self, pod: str, container: str, image: str) -> bool:
        return (
            fnmatch.fnmatchcase(pod, self.pod)
            and fnmatch.fnmatchcase(container, self.container)
            and fnmatch.fnmatchcase(image, self.image)
        )


@dataclass
class Faults:
    active: list[Fault] = field(default_factory=list)
    _used: dict[tuple[int, str, str], int] = field(default_factory=dict)

    def add(self, fault: Fault) -> Fault:
        self.active.append(fault)
        return fault

    def clear(self) -> None:
        self.active.clear()
        self._used.clear()

    def take(self, kind: FaultKind, pod: str, container: str, image: str) -> Fault | None:
        """The fault of ``kind`` that applies to this start of the container (counting ``times``)."""
        for index, fault in enumerate(self.active):
            if fault.kind is not kind or not fault.matches(pod, container, image):
                continue
            if fault.times is not None:
                key = (index, pod, container)
                if self._used.get(key, 0) >= fault.times:
                    continue
                self._used[key] = self._used.get(key, 0) + 1
            return fault
        return None

    def peek(self, kind: FaultKind, pod: str, container: str, image: str) -> Fault | None:
        for index, fault in enumerate(self.active):
            if fault.kind is kind and fault.matches(pod, container, image):
                if fault.times is not None and self._used.get((index, pod, container), 0) >= fault.times:
                    continue
                return fault
        return None
