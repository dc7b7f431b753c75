"""Execute a re-shard plan: raw byte copies (``copy_file_range``, in-kernel) from source shards.

Each output is written to ``<name>.partial``, fsynced, renamed, hashed and only then marked verified;
a killed run leaves a ``.partial`` (ignored and overwritten) or an unmarked file (rewritten). Measured on
a 2-vCPU VM, ``copy_file_range`` runs at ``cp`` speed, ~0.5 GB/s (docs/weights.md §6).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from capserve.core.errors import PermanentError
from capserve.core.weights.reshard import OutputFile
from capserve.core.weights.safetensors import SafetensorsHeader, header_length, parse_header
from capserve.tasks.resilience import local_task
from capserve.tasks.weights.fetch import FetchedFile
from capserve.tasks.weights.localfiles import hash_file, mark_verified, trusted_sha256, write_verified


@local_task(name="weights-read-local-headers")
def read_local_headers(source_dir: Path, files: list[str]) -> dict[str, SafetensorsHeader]:
    """Parse the headers of downloaded shards (8 + N bytes each) and check each tiles its file exactly."""
    headers = {}
    for rel in files:
        path = source_dir / rel
        with open(path, "rb") as fh:
            length = header_length(fh.read(8), what=str(path))
            fh.seek(0)
            header = parse_header(fh.read(8 + length), what=str(path))
        if header.file_size != path.stat().st_size:
            raise PermanentError(f"{path}: header covers {header.file_size} bytes, the file has {path.stat().st_size}")
        headers[rel] = header
    return headers


@local_task(name="weights-reshard-file")
def write_output(output: OutputFile, source_dir: Path, out_dir: Path) -> FetchedFile:
    """Write one re-sharded file (skipped when a verified copy is already there)."""
    known = trusted_sha256(out_dir, output.path)
    if known is not None:
        return FetchedFile(path=output.path, size=output.size, sha256=known, downloaded_bytes=0)
    final = out_dir / output.path
    partial = final.with_name(final.name + ".partial")
    final.parent.mkdir(parents=True, exist_ok=True)
    sources: dict[str, int] = {}
    try:
        with open(partial, "wb") as out:
            out.write(output.header)
            out.flush()
            for span in output.spans:
                fd = sources.get(span.source_file)
                if fd is None:
                    fd = sources[span.source_file] = os.open(source_dir / span.source_file, os.O_RDONLY)
                _copy(fd, out.fileno(), span.source_offset, span.nbytes)
            out.flush()
            os.fsync(out.fileno())
    finally:
        for fd in sources.values():
            os.close(fd)
    if partial.stat().st_size != output.size:
        raise PermanentError(f"{partial}: wrote {partial.stat().st_size} bytes, planned {output.size}")
    os.replace(partial, final)
    digest = hash_file(final)
    mark_verified(out_dir, output.path, digest.sha256)
    return FetchedFile(path=output.path, size=output.size, sha256=digest.sha256, downloaded_bytes=0)


def _copy(src: int, dst: int, offset: int, nbytes: int) -> None:
    """Append ``nbytes`` from ``offset`` of ``src`` to ``dst``: in-kernel when possible, else pread/write."""
    left, position = nbytes, offset
    try:
        while left:
            done = os.copy_file_range(src, dst, left, position)
            if done == 0:
                raise PermanentError(f"source ended {left} bytes early at offset {position}")
            left -= done
            position += done
        return
    except OSError as exc:  # EXDEV/ENOSYS/EINVAL: other file systems, old kernels; fall back below
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while left:
        block = os.pread(src, min(left, 16 << 20), position)
        if not block:
            raise PermanentError(f"source ended {left} bytes early at offset {position}")
        os.write(dst, block)
        left -= len(block)
        position += len(block)


@local_task(name="weights-write-document")
def write_document(root: Path, rel: str, body: bytes) -> FetchedFile:
    """Write a generated file (a per-node index) atomically, hashed and marked verified."""
    digest = write_verified(root, rel, body)
    return FetchedFile(path=rel, size=digest.size, sha256=digest.sha256, downloaded_bytes=0)
