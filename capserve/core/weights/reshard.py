"""The re-shard plan: per-rank expert files plus dense files, built from raw byte ranges of the sources.

Nothing is decoded: each output file is a new header followed by byte copies of source tensors, so
every tensor stays byte-equal to its source. Output files stay at or under ``max_file_bytes`` (5 GiB by
default: the largest single-request S3 upload, which keeps the stored SHA256 a full-object checksum —
S3 user guide "Checking object integrity"; multipart SHA256 is a checksum of part checksums). Inside a
file, tensors are ordered widest dtype first (then in source order) so mmapped tensors stay aligned,
as safetensors' own writer does (docs/weights.md §1.1).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from capserve.core.errors import PermanentError
from capserve.core.weights.placement import Layout, expert_of, expert_rank
from capserve.core.weights.plan import index_document
from capserve.core.weights.safetensors import DTYPE_BYTES, SafetensorsHeader, encode_header, header_entry_bytes

DENSE_GROUP = "dense"


@dataclass(frozen=True, slots=True)
class CopySpan:
    """One tensor's bytes: ``nbytes`` from absolute offset ``source_offset`` of ``source_file``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source_file: str
    source_offset: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class OutputFile:
    """One re-sharded file: its header bytes, then the spans in order."""

    path: str
    group: str  # "dense" or "ep<rank>"
    node: int | None  # None: every node
    header: bytes
    spans: tuple[CopySpan, ...]

    @property
    def size(self) -> int:
        return len(self.header) + sum(s.nbytes for s in self.spans)


@dataclass(frozen=True, slots=True)
class ReshardPlan:
    layout: Layout
    outputs: tuple[OutputFile, ...]

    def files_for_node(self, node: int) -> tuple[OutputFile, ...]:
        return tuple(o for o in self.outputs if o.node is None or o.node == node)

    def node_index(self, node: int) -> dict[str, object]:
        """The node's ``model.safetensors.index.json``: only tensors of files the node holds."""
        files = self.files_for_node(node)
        weight_map = {s.name: o.path for o in files for s in o.spans}
        return index_document(weight_map, sum(s.nbytes for o in files for s in o.spans))


def plan_reshard(
    headers: Mapping[str, SafetensorsHeader],
    layout: Layout,
    *,
    num_experts: int,
    max_file_bytes: int,
) -> ReshardPlan:
    """Group every tensor of the source files into dense / per-EP-rank output files under the size cap."""
    groups: dict[str, list[CopySpan]] = defaultdict(list)
    for source in sorted(headers):
        source_header = headers[source]
        for t in source_header.tensors:
            span = CopySpan(t.name, t.dtype, t.shape, source, source_header.data_start + t.begin, t.nbytes)
            expert = expert_of(t.name)
            if expert is None or not layout.splits_experts:
                groups[DENSE_GROUP].append(span)
            else:
                rank = expert_rank(expert, num_experts=num_experts, ep_size=layout.expert_parallel)
                groups[f"ep{rank:04d}"].append(span)

    outputs: list[OutputFile] = []
    for group in sorted(groups):
        parts = _split(groups[group], max_file_bytes)
        node = None if group == DENSE_GROUP else layout.node_of_rank(int(group[2:]))
        for i, spans in enumerate(parts):
            path = f"{group}-{i + 1:05d}-of-{len(parts):05d}.safetensors"
            header, _ = encode_header([(s.name, s.dtype, s.shape) for s in spans], metadata={"format": "pt"})
            output = OutputFile(path=path, group=group, node=node, header=header, spans=spans)
            if output.size > max_file_bytes:  # the estimate in _split is an upper bound; this cannot fire
                raise AssertionError(f"{path} is {output.size} bytes, above {max_file_bytes}")
            outputs.append(output)
    return ReshardPlan(layout=layout, outputs=tuple(outputs))


def _split(spans: list[CopySpan], max_file_bytes: int) -> list[tuple[CopySpan, ...]]:
    """Fill files greedily in source order, counting each tensor's header entry; then order each for alignment."""
    parts: list[list[CopySpan]] = []
    current: list[CopySpan] = []
    size = 8 + 40 + 7  # u64 length + '{"__metadata__":{"format":"pt"}}' + padding
    for span in spans:
        entry = header_entry_bytes(span.name, span.dtype, span.shape, 1 << 50, span.nbytes) + span.nbytes
        if 8 + 40 + 7 + entry > max_file_bytes:
            raise PermanentError(
                f"tensor {span.name!r} ({span.nbytes} bytes) cannot fit in a file of at most {max_file_bytes} bytes"
            )
        if current and size + entry > max_file_bytes:
            parts.append(current)
            current, size = [], 8 + 40 + 7
        current.append(span)
        size += entry
    if current:
        parts.append(current)
    # Stable sort: widest dtype first keeps offsets aligned; ties keep source (layer) order.
    return [tuple(sorted(p, key=lambda s: -DTYPE_BYTES[s.dtype])) for p in parts]
