"""The staging copy tool: ranged parts reassembled and hashed in order, a bad part named, good files kept, retries."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from pathlib import Path

import pytest

from capserve.tasks.weights import s3_copy_tool
from capserve.tasks.weights.s3_copy_tool import FileSpec, Permanent, Tuning, copy_files

PART = 1000
TUNING = Tuning(part_bytes=PART, requests=8, files_at_once=3, backoff_s=0.0)


def objects(*sizes: int) -> dict[str, bytes]:
    rng = random.Random(7)
    return {f"shard-{i}.safetensors": rng.randbytes(size) for i, size in enumerate(sizes)}


def specs(found: dict[str, bytes]) -> list[FileSpec]:
    return [FileSpec(hashlib.sha256(b).hexdigest(), len(b), key, f"sub/{key}") for key, b in found.items()]


class Store:
    """Ranged GETs answered out of order (a random short delay each), with faults on request."""

    def __init__(self, found: dict[str, bytes]) -> None:
        self.found = found
        self.asked: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()
        self.rng = random.Random(3)

    def __call__(self, key: str, first: int, last: int) -> tuple[list[bytes], int]:
        with self.lock:
            self.asked.append((key, first, last))
            delay = self.rng.random() / 500
        time.sleep(delay)
        data, total = self.answer(key, first, last)
        return [data[i : i + 300] for i in range(0, len(data), 300)], total  # as a connection delivers it

    def answer(self, key: str, first: int, last: int) -> tuple[bytes, int]:
        body = self.found[key]
        return body[first : last + 1], len(body)


def test_parts_fetched_out_of_order_are_reassembled_into_every_file(tmp_path: Path) -> None:
    found = objects(0, 1, PART - 1, PART, PART + 1, 5 * PART + 7, 23 * PART)
    store = Store(found)
    files, copied = copy_files(specs(found), str(tmp_path), store, tuning=TUNING, log=lambda _: None)
    assert (files, copied) == (7, sum(len(b) for b in found.values()))
    for key, body in found.items():
        assert (tmp_path / "sub" / key).read_bytes() == body
    assert not list(tmp_path.rglob("*.partial"))
    # Every byte was asked for once, in ranges of at most one part.
    assert len(store.asked) == len(set(store.asked)) == sum(-(-len(b) // PART) for b in found.values())
    assert max(last - first + 1 for _, first, last in store.asked) == PART


def test_a_corrupted_part_fails_the_copy_naming_the_file_and_leaves_no_partial(tmp_path: Path) -> None:
    found = objects(3 * PART, 4 * PART + 5)

    class Corrupt(Store):
        def answer(self, key: str, first: int, last: int) -> tuple[bytes, int]:
            data, total = super().answer(key, first, last)
            return (b"\0" + data[1:], total) if key == "shard-1.safetensors" and first == 2 * PART else (data, total)

    with pytest.raises(Permanent, match=r"sha256 mismatch for sub/shard-1\.safetensors \(s3://b/shard-1"):
        copy_files(specs(found), str(tmp_path), Corrupt(found), source=lambda k: f"s3://b/{k}", tuning=TUNING)
    assert not (tmp_path / "sub" / "shard-1.safetensors").exists()
    assert not list(tmp_path.rglob("*.partial"))


def test_an_object_of_another_size_than_the_manifest_fails_at_once(tmp_path: Path) -> None:
    found = objects(3 * PART)
    (spec,) = specs(found)
    bigger = FileSpec(spec.sha256, spec.size + 1, spec.key, spec.dest)
    store = Store(found)
    with pytest.raises(Permanent, match=r"sha256 mismatch for sub/shard-0\.safetensors .*S3 holds 3,000 bytes"):
        copy_files([bigger], str(tmp_path), store, tuning=TUNING)
    assert not list(tmp_path.rglob("*.partial"))


def test_a_file_already_there_with_its_hash_is_not_copied_again(tmp_path: Path) -> None:
    found = objects(2 * PART, 2 * PART, 2 * PART)
    good, stale, _ = specs(found)
    (tmp_path / "sub").mkdir()
    (tmp_path / good.dest).write_bytes(found[good.key])
    (tmp_path / stale.dest).write_bytes(b"x" * stale.size)  # the right size, other bytes: copied again
    store = Store(found)
    logged: list[str] = []
    files, copied = copy_files(specs(found), str(tmp_path), store, tuning=TUNING, log=logged.append)
    assert (files, copied) == (2, 4 * PART)
    assert {key for key, _, _ in store.asked} == {"shard-1.safetensors", "shard-2.safetensors"}
    assert logged == [f"already there: {good.dest}"]
    assert (tmp_path / stale.dest).read_bytes() == found[stale.key]


def test_a_short_read_and_a_server_error_are_fetched_again(tmp_path: Path) -> None:
    found = objects(4 * PART)
    faults = {PART: "short", 3 * PART: "5xx"}

    class Flaky(Store):
        def answer(self, key: str, first: int, last: int) -> tuple[bytes, int]:
            fault = faults.pop(first, None)
            if fault == "5xx":
                raise OSError("An error occurred (InternalError) when calling the GetObject operation (reached max "
                              "retries: 4): We encountered an internal error. Please try again.")
            data, total = super().answer(key, first, last)
            return (data[:-10], total) if fault == "short" else (data, total)

    store = Flaky(found)
    assert copy_files(specs(found), str(tmp_path), store, tuning=TUNING) == (1, 4 * PART)
    assert (tmp_path / "sub" / "shard-0.safetensors").read_bytes() == found["shard-0.safetensors"]
    assert [first for _, first, _ in store.asked].count(PART) == 2
    assert [first for _, first, _ in store.asked].count(3 * PART) == 2


def test_a_client_error_is_not_retried(tmp_path: Path) -> None:
    found = objects(4 * PART)

    class Denied(Store):
        def answer(self, key: str, first: int, last: int) -> tuple[bytes, int]:
            raise Permanent(f"s3://b/{key}: An error occurred (AccessDenied) when calling the GetObject operation")

    store = Denied(found)
    with pytest.raises(Permanent, match="AccessDenied"):
        copy_files(specs(found), str(tmp_path), store, tuning=Tuning(part_bytes=PART, requests=1, files_at_once=1))
    assert len(store.asked) == 1


@pytest.mark.parametrize("corrupt", [False, True])
def test_the_node_marker_is_written_only_after_every_file_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt: bool
) -> None:
    found = objects(3 * PART, 2 * PART)
    listing = [[s.sha256, s.size, s.key, s.dest] for s in specs(found)]
    if corrupt:
        listing[1][0] = "0" * 64
    marker = tmp_path / ".capserve-node"
    marker.write_text("0\n")  # left by an earlier stage of another revision
    monkeypatch.setattr(s3_copy_tool, "s3_get_range", lambda bucket, base, requests: Store(found))
    env = {"BUCKET": "b", "BASE": "m", "TARGET": str(tmp_path), "FILES": json.dumps(listing), "NODE_INDEX": "1",
           "NODE_MARKER": ".capserve-node", "PART_BYTES": str(PART), "PROCESSES": "1"}
    assert s3_copy_tool.main(env) == (1 if corrupt else 0)
    assert marker.exists() is not corrupt
    if not corrupt:
        assert marker.read_text() == "1\n"
