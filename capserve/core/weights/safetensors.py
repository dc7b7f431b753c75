"""The safetensors file layout, read and written as raw bytes (no tensor is ever decoded).

Layout (safetensors format spec, checked against safetensors 0.8.0, docs/weights.md §1.1):
``[u64 little-endian N][N bytes of UTF-8 JSON, space-padded so N % 8 == 0][data]``. The JSON maps each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` relative to the data section, plus an
optional ``"__metadata__"`` of strings. The data section must be tiled exactly: safetensors refuses a hole
("file not fully covered") or an overlap ("invalid offset").
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod

from capserve.core.errors import PermanentError

# Bytes per element. "F4"/"F6" packed types are not used by the checkpoints we plan (K3 stores MXFP4 as U8).
DTYPE_BYTES: Mapping[str, int] = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U8": 1,
    "I8": 1,
    "BOOL": 1,
}

# A header larger than this is refused before it is read (safetensors itself caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of one file: where its bytes are, relative to the file's data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """A parsed header: ``data_start`` is where offset 0 of the data section lies in the file."""

    header_len: int
    tensors: tuple[TensorEntry, ...]
    metadata: Mapping[str, str]

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def data_bytes(self) -> int:
        return max((t.end for t in self.tensors), default=0)

    @property
    def file_size(self) -> int:
        return self.data_start + self.data_bytes


def header_length(prefix: bytes, *, what: str) -> int:
    """N from the first 8 bytes of a file, refusing nonsense before anything large is read."""
    if len(prefix) < 8:
        raise PermanentError(f"{what}: shorter than 8 bytes, not a safetensors file")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES:
        raise PermanentError(f"{what}: header length {length} is above {MAX_HEADER_BYTES}, not a safetensors file")
    return int(length)


def parse_header(blob: bytes, *, what: str) -> SafetensorsHeader:
    """Parse the first ``8 + N`` bytes of a file (more is fine) and check the offsets tile the data section."""
    length = header_length(blob, what=what)
    if len(blob) < 8 + length:
        raise PermanentError(f"{what}: header needs {8 + length} bytes, got {len(blob)}")
    try:
        raw = json.loads(blob[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError(f"{what}: header is not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise PermanentError(f"{what}: header is not a JSON object")
    metadata = raw.pop("__metadata__", None) or {}
    tensors = [_entry(name, value, what) for name, value in raw.items()]
    tensors.sort(key=lambda t: (t.begin, t.end))
    check_tiling(tensors, what=what)
    return SafetensorsHeader(header_len=length, tensors=tuple(tensors), metadata=dict(metadata))


def tensors_from_offsets(
    items: Iterable[tuple[str, str, Sequence[int], Sequence[int]]], *, what: str
) -> list[TensorEntry]:
    """(name, dtype, shape, data_offsets) rows, as the Hub's header metadata gives them, checked like a header."""
    tensors = [
        _entry(name, {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}, what)
        for name, dtype, shape, offsets in items
    ]
    tensors.sort(key=lambda t: (t.begin, t.end))
    check_tiling(tensors, what=what)
    return tensors


def _entry(name: str, value: object, what: str) -> TensorEntry:
    if not isinstance(value, dict):
        raise PermanentError(f"{what}: tensor {name!r} has no dtype/shape/data_offsets object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise PermanentError(f"{what}: tensor {name!r} has dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise PermanentError(f"{what}: tensor {name!r} has an invalid shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise PermanentError(f"{what}: tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    if end - begin != prod(shape) * DTYPE_BYTES[dtype] or begin < 0:
        raise PermanentError(
            f"{what}: tensor {name!r} spans {end - begin} bytes, its dtype and shape need "
            f"{prod(shape) * DTYPE_BYTES[dtype]}"
        )
    return TensorEntry(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def check_tiling(tensors: Sequence[TensorEntry], *, what: str) -> None:
    """The tensors (sorted by begin) must cover [0, end) with no hole and no overlap, as safetensors demands."""
    position = 0
    for t in tensors:
        if t.begin != position:
            problem = "a hole" if t.begin > position else "an overlap"
            raise PermanentError(f"{what}: {problem} before tensor {t.name!r} at data offset {t.begin}")
        position = t.end


def encode_header(
    tensors: Sequence[tuple[str, str, tuple[int, ...]]], *, metadata: Mapping[str, str] | None = None
) -> tuple[bytes, list[TensorEntry]]:
    """The ``8 + N`` header bytes for tensors written back to back in the given order, and their entries."""
    entries: list[TensorEntry] = []
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, dtype, shape in tensors:
        nbytes = prod(shape) * DTYPE_BYTES[dtype]
        entries.append(TensorEntry(name=name, dtype=dtype, shape=shape, begin=offset, end=offset + nbytes))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    body = json.dumps(header, separators=(",", ":")).encode("utf-8")
    body += b" " * (-len(body) % 8)  # keeps every tensor 8-byte aligned when the file is mmapped
    return struct.pack("<Q", len(body)) + body, entries


def header_entry_bytes(name: str, dtype: str, shape: tuple[int, ...], offset: int, nbytes: int) -> int:
    """Upper bound of the JSON bytes one tensor adds to a header (used to keep output files under a size cap)."""
    return (
        len(
            json.dumps(
                {name: {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}},
                separators=(",", ":"),
            )
        )
        + 1
    )
