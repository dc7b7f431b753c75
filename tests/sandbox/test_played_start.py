"""A vLLM start as the sandbox plays it on a simulated block: the time model's phases, on the block's clock, in
vLLM's own log lines, cold until a compile is left in the cache."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.hub.checkpoint import TINY_K3, write_checkpoint
from capserve_sandbox.kube.kubelet.played_start import (
    StandsFor,
    leave_compiled,
    node_bytes,
    played_start,
    server_key,
    weights_storage,
)

from capserve.core.rollout.startup_log import engine_startup_from_log
from capserve.core.timeline import weight_read_bytes_per_s

K3_BYTES = 1_555_806_383_232  # the catalog's Kimi K3, as stored


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(TINY_K3, tmp_path_factory.mktemp("tiny-k3"))


@pytest.fixture
def playing() -> Iterator[None]:
    """A simulated block whose runs are scheduled: the clock runs fast between them and may skip."""
    CLOCK.reset()
    CLOCK.simulate(fast_rate=5760, near_rate=60, near=timedelta(minutes=3), hold=timedelta(minutes=2))
    CLOCK.register([datetime.now(UTC) + timedelta(days=2)])
    yield
    CLOCK.reset()


def test_the_node_loads_the_stand_ins_share_of_the_model_it_stands_for(checkpoint: Path, tmp_path: Path) -> None:
    stands_for = StandsFor(model_bytes=K3_BYTES)
    assert node_bytes(checkpoint, stands_for) == K3_BYTES  # one node holds every file
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    half = tmp_path / "node-1"
    half.mkdir()
    (half / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in shards[: len(shards) // 2]:
        (half / name).write_bytes((checkpoint / name).read_bytes())
    held = sum((half / name).stat().st_size for name in shards[: len(shards) // 2])
    assert node_bytes(half, stands_for) == round(K3_BYTES * held / index["metadata"]["total_size"])


def test_a_cold_start_takes_the_modelled_time_on_the_blocks_clock_and_says_so_in_vllms_lines(
    checkpoint: Path, tmp_path: Path, playing: None
) -> None:
    lines: list[str] = []
    cache = tmp_path / "cache" / "vllm"
    start = played_start(
        StandsFor(model_bytes=K3_BYTES), host_model=checkpoint, cache_root=cache, server_key="k3/tp8",
        instance_type="p6-b300.48xlarge", storage="nvme", nodes=1, write=lines.append,
    )
    assert not start.warm

    async def rollout() -> timedelta:
        # The run that applied the pod works: the clock holds (it would otherwise jump to the block's next waypoint
        # and hold there until its run started, minutes of wall time), and the start begins at this instant.
        began = CLOCK.work("rollout")
        playing = asyncio.ensure_future(start.play("/models/k3"))
        await asyncio.sleep(0)  # the start logs vLLM's first line and sleeps until its first phase ends
        CLOCK.rest("rollout")  # the run waits for the server: the block moves to the start's stops
        await playing
        return CLOCK.now() - began

    took = asyncio.run(rollout())
    # The phases take their modelled time exactly (to the microseconds each phase's instant is rounded to), and
    # the clock holds while the server comes up.
    assert took.total_seconds() == pytest.approx(start.seconds, abs=1e-3)
    start.done()
    start.listening(8000)
    assert CLOCK.stops() == []  # nothing modelled is left to land on
    measured = engine_startup_from_log("\n".join(lines))
    phases = {phase.name: phase.seconds for phase in start.phases}
    read = weight_read_bytes_per_s("p6-b300.48xlarge", "nvme", nodes=1)
    assert measured.weights_load_s == pytest.approx(K3_BYTES / read, abs=0.01)
    assert measured.compile_s == pytest.approx(phases["compile/autotune"], abs=0.01)
    assert measured.to_listening_s is not None and measured.to_listening_s >= start.seconds - 1


def test_the_compile_a_cold_start_leaves_makes_the_next_start_of_that_server_warm(
    checkpoint: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache" / "vllm"

    def start(key: str) -> bool:
        return played_start(
            StandsFor(model_bytes=K3_BYTES), host_model=checkpoint, cache_root=cache, server_key=key,
            instance_type="p6-b300.48xlarge", storage="nvme", nodes=1, write=lambda line: None,
        ).warm

    assert start("k3/tp8") is False
    leave_compiled(cache, "k3/tp8")
    assert (start("k3/tp8"), start("k3/tp4-pp2")) == (True, False)  # another layout compiles anew


def test_a_new_revision_served_from_the_same_path_with_the_same_config_starts_warm(
    checkpoint: Path, tmp_path: Path
) -> None:
    """vLLM's compile hash covers its version, the model path and config.json, not the weights: the graphs the
    last revision compiled serve the next one of the same architecture; another config, path or vLLM does not."""
    cache = tmp_path / "cache" / "vllm"
    revision = tmp_path / "revision-2"
    shutil.copytree(checkpoint, revision)
    shard = next(revision.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[::-1])  # new weights
    deeper = tmp_path / "deeper"
    shutil.copytree(checkpoint, deeper)
    config = json.loads((deeper / "config.json").read_text())
    (deeper / "config.json").write_text(json.dumps({**config, "capserve_layers": 2}))

    def key(host: Path, model: str = "/model/moonshotai/Kimi-K3", version: str = "0.32.0") -> str:
        return server_key(model=model, sizes={"tp": 8}, vllm_version=version, host_model=host)

    def warm(server: str) -> bool:
        return played_start(
            StandsFor(model_bytes=K3_BYTES), host_model=checkpoint, cache_root=cache, server_key=server,
            instance_type="p6-b300.48xlarge", storage="nvme", nodes=1, write=lambda line: None,
        ).warm

    leave_compiled(cache, key(checkpoint))
    assert warm(key(revision)) is True
    assert warm(key(deeper)) is False  # another config.json: another graph
    assert warm(key(revision, model="/weights/moonshotai/Kimi-K3/" + "b" * 40)) is False  # a path naming the sha
    assert warm(key(revision, version="0.33.0")) is False


def test_weights_on_a_persistent_volume_claim_are_read_from_fsx() -> None:
    pod = {
        "spec": {
            "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": "fsx"}}],
            "containers": [{"name": "vllm", "volumeMounts": [{"name": "weights", "mountPath": "/weights"}]}],
        }
    }
    assert weights_storage(pod, "/weights/k3") == "fsx"


def test_a_copied_shard_stands_for_its_share_of_the_model_by_the_shards_beside_it() -> None:
    from capserve_sandbox.kube.kubelet.played_staging import stands_for_bytes

    listing = {
        "m/sha/": {"m/sha/model-1.safetensors": 100, "m/sha/model-2.safetensors": 300, "m/sha/config.json": 50},
        "m/one/": {"m/one/model.safetensors": 100},
    }

    def list_sizes(bucket: str, prefix: str) -> dict[str, int]:
        assert bucket == "b"
        return listing.get(prefix, {})

    k3 = StandsFor(model_bytes=K3_BYTES)
    assert stands_for_bytes("m/sha/model-1.safetensors", 100, k3, list_sizes, "b") == K3_BYTES // 4
    assert stands_for_bytes("m/sha/config.json", 50, k3, list_sizes, "b") == 50  # not a weight: only itself
    assert stands_for_bytes("m/sha/ep1/node-0/model.safetensors.index.json", 9, k3, list_sizes, "b") == 9
    assert stands_for_bytes("m/one/model.safetensors", 100, k3, list_sizes, "b") == K3_BYTES  # a lone file: all
