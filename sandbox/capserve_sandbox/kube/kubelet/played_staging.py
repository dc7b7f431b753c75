"""The S3 → node copy of the weights as the sandbox plays it on a simulated block (docs/sandbox-kubelet.md,
"A played staging").

The staging Job copies the stand-in checkpoint's few MB in a second, where a p6-b300 takes a quarter of an hour
for the model it stands for. When the sandbox is told what the checkpoint stands for (``StandsFor``), each
``aws s3 cp`` of a weight file from S3 onto a node also spends, on the block's clock, the time the time model
gives the bytes that file stands for:

- a ``.safetensors`` file stands for its share of the model: its bytes × the model's bytes ÷ the bytes of every
  ``.safetensors`` file beside it in S3 (the weights stage publishes the checkpoint's shards side by side under
  the commit, and each node's index under its layout: ``capserve.core.weights.assembly``); any other file
  (config, tokenizer, index, compile cache) stands only for its own bytes;
- a node takes its files at the time model's staging rate of its instance type
  (``capserve.core.timeline.s3_to_node_bytes_per_s``: the Job's streams, the network and the NVMe array's
  writes), one after another through the node's single pipe, so the node's copies add up to the model's
  figure whatever the number of files and streams.

The clock skips through each copy (``SandboxClock.skip_to``): nothing real runs meanwhile. Between its copies
the Job's process really runs (Python's start, boto3, the hashing, the renames), in wall time that a loaded host
stretches: on a playing block the process holds the clock for as long as it runs (``process_hold.py``, as a flow
run's process holds it while it works), except while a copy it asked for is under way, so the block sees the
copies' modelled time and nothing of the host's speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import uuid4

from capserve.core.timeline import s3_to_node_bytes_per_s
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube.kubelet.played_start import StandsFor

_POLL_S = 0.02

# What the staging play needs from S3: the sizes of the objects directly under a prefix, by key.
ListSizes = Callable[[str, str], dict[str, int]]


def stands_for_bytes(key: str, size: int, stands_for: StandsFor, list_sizes: ListSizes, bucket: str) -> int:
    """The bytes of the model the copied object ``key`` (``size`` bytes) stands for."""
    prefix, _, name = key.rpartition("/")
    if not name.endswith(".safetensors"):
        return size
    beside = list_sizes(bucket, f"{prefix}/" if prefix else "")
    whole = sum(found for other, found in beside.items() if other.endswith(".safetensors"))
    if whole <= 0:
        return size
    return round(stands_for.model_bytes * min(size / whole, 1.0))


@dataclass
class StagingPlay:
    """Each node's S3 → node copies, in turn through the node's pipe, on the block's clock."""

    stands_for: StandsFor
    now: Callable[[], datetime] = CLOCK.now
    _pipes: dict[str, datetime] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seconds(self, node_bytes: int, instance_type: str | None) -> float:
        return node_bytes / s3_to_node_bytes_per_s(instance_type, self.stands_for.figures)

    def copied(self, node: str, instance_type: str | None, node_bytes: int, *, party: str | None = None) -> None:
        """Block the calling copy until the node's pipe has carried ``node_bytes`` after what it carries already;
        ``party`` (the process that asked, ``ProcessHold``) waits for it meanwhile instead of holding the clock."""
        with self._lock:
            now = self.now()
            start = max(now, self._pipes.get(node, now))
            until = start + timedelta(seconds=self.seconds(node_bytes, instance_type))
            self._pipes[node] = until
        token = f"staging-{uuid4().hex}"
        CLOCK.skip_to(token, until)
        if party is not None:
            CLOCK.waits_for(party, token, until)
        try:
            while self.now() < until:
                time.sleep(_POLL_S)
        finally:
            if party is not None:
                CLOCK.awake(party, token)  # its process works on: it holds the clock again
            CLOCK.skipped(token)
