"""The staging Job's copy: one node's weight files from S3 onto its disk at the storage's rate (docs/weights.md §7).

Runs inside the staging Job's container as ``python3 -c <this file>`` (core/weights/staging_job.py passes the
source; it needs only the standard library and boto3), so it imports nothing of capserve.

- **Parallel ranged GETs**: every file is cut into ``PART_BYTES`` ranges (8–16 MB, AWS's S3 performance
  guidance) and ``REQUESTS`` of them are in flight at once, taken round-robin from ``FILES_AT_ONCE`` files,
  spread over ``PROCESSES`` processes so one interpreter's lock does not bound the rate.
- **Written in place, hashed while written**: each part is written at its offset (``os.pwrite``) into
  ``<dest>.partial`` and handed to its file's sha256 in order (a small reorder buffer holds parts that arrive
  early); when the last part is hashed the digest is compared with the manifest's and the file renamed into
  place. No second read of the file; a mismatch removes the partial file and names it.
- **Retried**: a part whose body comes back short, a 5xx or a dropped connection is fetched again (after
  botocore's own retries); a 4xx is not.
- **Resumable**: a file already at its destination with the manifest's size and sha256 is not copied again.

Environment: ``BUCKET``, ``BASE`` (the key prefix of the files), ``TARGET`` (the node folder), ``FILES`` (a JSON
list of ``[sha256, size, key, dest]``), ``NODE_INDEX``, ``NODE_MARKER``, ``PART_BYTES``, ``REQUESTS``,
``FILES_AT_ONCE``, ``PROCESSES``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

MB = 1 << 20


class Permanent(Exception):
    """A failure another attempt will not cure (a 4xx): the copy stops at once."""


@dataclass(frozen=True)
class FileSpec:
    sha256: str
    size: int
    key: str
    dest: str  # relative to the target folder


# (key, first byte, last byte) -> (the bytes as they arrive, the object's total size from Content-Range)
GetRange = Callable[[str, int, int], tuple[Iterable[bytes], int]]
CHUNK = 1 << 20  # read from the connection and written this much at a time


@dataclass(frozen=True)
class Tuning:
    part_bytes: int = 16 * MB
    requests: int = 128
    files_at_once: int = 16
    attempts: int = 5  # per part, on top of botocore's own retries of a request (the Job's ATTEMPTS)
    backoff_s: float = 0.2


def already_there(path: str, spec: FileSpec, chunk: int = 16 * MB) -> bool:
    """True when ``path`` holds exactly ``spec``'s bytes (its size, then its sha256)."""
    try:
        if os.path.getsize(path) != spec.size:
            return False
    except OSError:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest() == spec.sha256


@dataclass
class _File:
    """One file being copied: its partial file, its next part to hand out and its in-order hasher."""

    spec: FileSpec
    path: str
    source: str
    part_bytes: int
    fd: int = -1
    parts: int = 0
    handed_out: int = 0
    hashed: int = 0
    early: dict[int, list[bytes]] = field(default_factory=dict)  # the reorder buffer
    draining: bool = False
    done: bool = False
    digest: Any = field(default_factory=hashlib.sha256)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        partial = self.path + ".partial"
        self.fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, self.spec.size)
        self.parts = -(-self.spec.size // self.part_bytes)

    def span(self, index: int) -> tuple[int, int]:
        first = index * self.part_bytes
        return first, min(first + self.part_bytes, self.spec.size) - 1


class _Copy:
    """One process's share of the files, copied part by part on a pool of threads."""

    def __init__(self, files: list[_File], get_range: GetRange, tuning: Tuning, log: Callable[[str], None]) -> None:
        self.files, self.get_range, self.tuning, self.log = files, get_range, tuning, log
        # Parts fetched but not yet hashed: bounds the memory of the reorder buffers.
        self.slots = threading.Semaphore(2 * tuning.requests)
        self.failure: str | None = None
        self.failed = threading.Event()

    def fail(self, message: str) -> None:
        if not self.failed.is_set():
            self.failure = message
            self.failed.set()

    def schedule(self) -> Iterator[tuple[_File, int]]:
        """Parts round-robin over ``files_at_once`` open files, each file's parts in order."""
        waiting, active = deque(self.files), deque[_File]()
        while waiting or active:
            while waiting and len(active) < self.tuning.files_at_once:
                opened = waiting.popleft()
                opened.open()
                if opened.parts == 0:
                    self.finish(opened)
                    continue
                active.append(opened)
            if not active:
                return
            current = active.popleft()
            yield current, current.handed_out
            current.handed_out += 1
            if current.handed_out < current.parts:
                active.append(current)

    def fetch(self, file: _File, index: int) -> list[bytes]:
        """Part ``index`` of ``file``, written at its offset as it arrives; its chunks, for the hash."""
        first, last = file.span(index)
        error: Exception | None = None
        for attempt in range(self.tuning.attempts):
            if self.failed.is_set():
                raise Permanent("stopped")
            try:
                chunks, total = self.get_range(file.spec.key, first, last)
                if total != file.spec.size:
                    raise Permanent(
                        f"sha256 mismatch for {file.spec.dest} ({file.source}): S3 holds {total:,} bytes, "
                        f"the manifest {file.spec.size:,}"
                    )
                kept, offset = [], first
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:  # pwrite may write less than asked
                        written = os.pwrite(file.fd, view, offset)
                        view, offset = view[written:], offset + written
                    kept.append(chunk)
            except Permanent:
                raise
            except Exception as exc:  # noqa: BLE001 - a 5xx or a dropped connection: fetched again
                error = exc
            else:
                if offset == last + 1:
                    return kept
                error = OSError(f"short read: {offset - first:,} of {last - first + 1:,} bytes")
            time.sleep(self.tuning.backoff_s * 2**attempt)
        raise Permanent(f"could not read bytes {first}-{last} of {file.source} for {file.spec.dest}: {error}")

    def part(self, file: _File, index: int) -> None:
        try:
            self.hash_in_order(file, index, self.fetch(file, index))
        except Exception as exc:  # noqa: BLE001 - the first failure stops the copy and is reported
            self.slots.release()
            self.fail(str(exc) if isinstance(exc, Permanent) else f"{file.spec.dest} ({file.source}): {exc!r}")

    def hash_in_order(self, file: _File, index: int, data: list[bytes]) -> None:
        """Deposit part ``index``; whoever finds the next part in order hashes it (one thread per file at a time)."""
        with file.lock:
            file.early[index] = data
            if file.draining:
                return
            file.draining = True
        while True:
            with file.lock:
                block = file.early.pop(file.hashed, None)
                if block is None:
                    file.draining = False
                    return
                file.hashed += 1
                done = file.hashed == file.parts
            for chunk in block:
                file.digest.update(chunk)  # releases the GIL for large blocks
            self.slots.release()
            if done:
                self.finish(file)

    def finish(self, file: _File) -> None:
        file.done = True
        os.close(file.fd)
        partial = file.path + ".partial"
        if file.digest.hexdigest() != file.spec.sha256:
            os.unlink(partial)
            self.fail(f"sha256 mismatch for {file.spec.dest} ({file.source})")
            return
        os.rename(partial, file.path)

    def run(self) -> None:
        with ThreadPoolExecutor(self.tuning.requests, thread_name_prefix="part") as pool:
            for file, index in self.schedule():
                while not self.slots.acquire(timeout=0.2):
                    if self.failed.is_set():
                        break
                if self.failed.is_set():
                    break
                pool.submit(self.part, file, index)
        if self.failure is not None:
            for file in self.files:  # a later run starts these again from zero; leave nothing half-written
                if file.fd >= 0 and not file.done:
                    os.close(file.fd)
                    os.unlink(file.path + ".partial")
            raise Permanent(self.failure)


def copy_files(
    specs: list[FileSpec],
    target: str,
    get_range: GetRange,
    *,
    source: Callable[[str], str] = str,
    tuning: Tuning | None = None,
    log: Callable[[str], None] = print,
) -> tuple[int, int]:
    """Copy ``specs`` under ``target``; returns (files copied, bytes copied). Raises ``Permanent`` naming the file."""
    tuning = tuning or Tuning()
    paths = [os.path.join(target, spec.dest) for spec in specs]
    with ThreadPoolExecutor(max(1, tuning.files_at_once)) as pool:
        present = list(pool.map(already_there, paths, specs))
    todo = [
        _File(spec, path, source(spec.key), tuning.part_bytes)
        for spec, path, there in zip(specs, paths, present, strict=True)
        if not there
    ]
    for spec, there in zip(specs, present, strict=True):
        if there:
            log(f"already there: {spec.dest}")
    _Copy(todo, get_range, tuning, log).run()
    return len(todo), sum(f.spec.size for f in todo)


_session: Any = None  # this copy's boto3 session (``s3_session``)


def s3_session() -> Any:
    """The copy's one boto3 session. ``main`` makes it, and an S3 client, before it forks the group processes: each
    child then makes its client from the S3 model and endpoint rules the parent read (botocore caches them per
    session) instead of importing boto3 and reading them again (375 ms of CPU per child, 20 ms this way)."""
    global _session
    if _session is None:
        import boto3

        _session = boto3.session.Session()
    return _session


def s3_get_range(bucket: str, base: str, requests: int) -> GetRange:
    """Ranged GETs through boto3 (credentials and endpoint from the container's environment)."""
    from botocore.config import Config
    from botocore.exceptions import ClientError

    config = Config(max_pool_connections=requests, retries={"mode": "standard", "max_attempts": 5})
    client = s3_session().client("s3", config=config)

    def get(key: str, first: int, last: int) -> tuple[Iterable[bytes], int]:
        try:
            answer = client.get_object(Bucket=bucket, Key=f"{base}/{key}", Range=f"bytes={first}-{last}")
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if 400 <= status < 500 and status != 429:
                raise Permanent(f"s3://{bucket}/{base}/{key}: {exc}") from exc
            raise
        total = int(str(answer.get("ContentRange") or f"/{answer['ContentLength']}").rsplit("/", 1)[1])
        return answer["Body"].iter_chunks(CHUNK), total

    return get


def _group(specs: list[FileSpec], groups: int) -> list[list[FileSpec]]:
    """Deal the files, largest first, to the group with the fewest bytes so far."""
    dealt: list[list[FileSpec]] = [[] for _ in range(groups)]
    sizes = [0] * groups
    for spec in sorted(specs, key=lambda s: -s.size):
        lightest = sizes.index(min(sizes))
        dealt[lightest].append(spec)
        sizes[lightest] += spec.size
    return [group for group in dealt if group]


def _copy_group(specs: list[FileSpec], env: dict[str, str], tuning: Tuning) -> int:
    bucket, base, target = env["BUCKET"], env["BASE"], env["TARGET"]
    try:
        files, copied = copy_files(
            specs,
            target,
            s3_get_range(bucket, base, tuning.requests),
            source=lambda key: f"s3://{bucket}/{base}/{key}",
            tuning=tuning,
        )
    except (Permanent, OSError) as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    print(f"copied {files} files ({copied:,} bytes); {len(specs) - files} already there", flush=True)
    return 0


def main(env: dict[str, str]) -> int:
    specs = [FileSpec(sha, int(size), key, dest) for sha, size, key, dest in json.loads(env["FILES"])]
    target, marker = env["TARGET"], os.path.join(env["TARGET"], env["NODE_MARKER"])
    os.makedirs(target, exist_ok=True)
    if os.path.exists(marker):
        os.unlink(marker)
    groups = _group(specs, max(1, int(env.get("PROCESSES", "1"))))
    tuning = Tuning(
        part_bytes=int(env.get("PART_BYTES", 16 * MB)),
        requests=max(1, int(env.get("REQUESTS", "128")) // max(1, len(groups))),
        files_at_once=max(1, int(env.get("FILES_AT_ONCE", "16")) // max(1, len(groups))),
        attempts=max(1, int(env.get("ATTEMPTS", "5"))),
    )
    started = time.monotonic()
    if len(groups) <= 1:
        code = _copy_group(specs, env, tuning)
    else:  # one process per group: the interpreter's lock bounds what one process hashes and copies
        s3_session().client("s3")  # read botocore's S3 files once, here: the children inherit them
        sys.stdout.flush()
        children = []
        for group in groups:
            pid = os.fork()
            if pid == 0:
                os._exit(_copy_group(group, env, tuning))
            children.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
        code = 1 if any(codes) else 0
    if code:
        return 1
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(f"{env['NODE_INDEX']}\n")
    seconds = time.monotonic() - started
    total = sum(spec.size for spec in specs)
    print(f"staged {len(specs)} files into {target} (node {env['NODE_INDEX']}): {total:,} bytes in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
