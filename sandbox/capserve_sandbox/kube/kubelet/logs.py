"""Container output as ``kubectl logs`` serves it: per container, the current instance and the previous one."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

MAX_LINES = 20_000  # per instance; the kubelet rotates logs too (containerLogMaxSize)


@dataclass
class InstanceLog:
    """The output of one run of a container."""

    lines: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=MAX_LINES))

    def write(self, text: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for line in text.splitlines() or [""]:
            self.lines.append((stamp, line))

    def text(self, tail: int | None = None, timestamps: bool = False) -> str:
        lines = list(self.lines)
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "".join(f"{stamp} {line}\n" if timestamps else f"{line}\n" for stamp, line in lines)


@dataclass
class ContainerLogs:
    current: InstanceLog | None = None
    previous: InstanceLog | None = None

    def new_instance(self) -> InstanceLog:
        if self.current is not None:
            self.previous = self.current
        self.current = InstanceLog()
        return self.current
