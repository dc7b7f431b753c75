"""The per-node plan, the re-shard plan and the per-node index files, from headers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capserve_sandbox.hub.checkpoint import K3, TINY_K3, virtual_tensors_by_file, write_checkpoint

from capserve.core.catalog import get_model
from capserve.core.catalog.hf_config import model_from_hf_config
from capserve.core.errors import PermanentError
from capserve.core.weights.listing import RepoFile, RepoListing
from capserve.core.weights.placement import Layout, expert_of
from capserve.core.weights.plan import INDEX_NAME, node_index_whole_files, plan_weights
from capserve.core.weights.reshard import plan_reshard
from capserve.core.weights.safetensors import encode_header, parse_header
from capserve.tasks.weights.reshard import read_local_headers, write_output

SHA = "a" * 40


def listing_for(tensors_by_file: dict, extra: dict[str, int] | None = None) -> RepoListing:
    files = [RepoFile(path=p, size=8 + 64 + sum(t.nbytes for t in ts), sha256="b" * 64)
             for p, ts in tensors_by_file.items()]
    files += [RepoFile(path=p, size=s, git_oid="c" * 40) for p, s in (extra or {}).items()]
    return RepoListing(repo="org/model", revision_sha=SHA, files=tuple(sorted(files, key=lambda f: f.path)))


def test_k3_bytes_per_node_shrink_with_nodes() -> None:
    tensors = virtual_tensors_by_file(K3)
    listing = listing_for(tensors, {"config.json": 3000})
    per_node = {}
    for nodes in (1, 2, 4):
        plan = plan_weights(listing, tensors, Layout(nodes=nodes, expert_parallel=8 * nodes))
        assert plan.num_experts == 896 and plan.tensors > 490_000
        assert plan.reshard is (nodes > 1)  # layer-ordered shards mix every rank's experts
        per_node[nodes] = max(plan.bytes_per_node)
        assert plan.bytes_naive_per_node == listing.bytes_total
    assert per_node[1] == pytest.approx(listing.bytes_total, rel=1e-3)
    # dense (~7 %) everywhere, experts split: 2 nodes ≈ 0.54×, 4 nodes ≈ 0.30× (docs/kimi-k3.md §3: 833/471 of 1556 GB)
    assert 0.50 < per_node[2] / per_node[1] < 0.58
    assert 0.27 < per_node[4] / per_node[1] < 0.34


def test_whole_file_index_names_only_files_on_the_node() -> None:
    tensors = virtual_tensors_by_file(TINY_K3)
    # Give node 1 a file of its own experts only, so node 0 does not need it.
    last = sorted(tensors)[-1]
    plan = plan_weights(listing_for(tensors), tensors, Layout(nodes=2, expert_parallel=2))
    for node in (0, 1):
        index = node_index_whole_files(plan, tensors, node)
        named = set(index["weight_map"].values())  # type: ignore[union-attr]
        assert named == set(plan.node_plans[node].weight_files)
        assert last in named  # the final norm/lm_head file is dense: every node needs it


def test_plan_rejects_ep_without_experts() -> None:
    tensors = {"model.safetensors": [t for t in virtual_tensors_by_file(TINY_K3)[sorted(virtual_tensors_by_file(
        TINY_K3))[0]] if expert_of(t.name) is None]}
    with pytest.raises(PermanentError, match="no routed expert"):
        plan_weights(listing_for(tensors), tensors, Layout(nodes=2, expert_parallel=2), num_experts=0)


def test_reshard_copies_every_tensor_byte_equal_and_caps_sizes(tmp_path: Path) -> None:
    source = write_checkpoint(TINY_K3, tmp_path / "src")
    shards = sorted(p.name for p in source.glob("*.safetensors"))
    headers = read_local_headers.fn(source, shards)
    layout = Layout(nodes=2, expert_parallel=4)
    cap = 600 * 1024
    plan = plan_reshard(headers, layout, num_experts=TINY_K3.num_experts, max_file_bytes=cap)
    out = tmp_path / "out"
    for output in plan.outputs:
        written = write_output.fn(output, source, out)
        assert written.size == output.size <= cap
        assert (out / output.path).stat().st_size == output.size

    original = {}
    for shard in shards:
        blob = (source / shard).read_bytes()
        h = headers[shard]
        for t in h.tensors:
            original[t.name] = blob[h.data_start + t.begin : h.data_start + t.end]
    copied = {}
    for output in plan.outputs:
        blob = (out / output.path).read_bytes()
        h = parse_header(blob, what=output.path)  # also checks the data section is tiled exactly
        assert h.file_size == len(blob)
        for t in h.tensors:
            copied[t.name] = blob[h.data_start + t.begin : h.data_start + t.end]
            expert = expert_of(t.name)
            if expert is not None:
                assert output.node == layout.node_of_expert(expert, TINY_K3.num_experts)
    assert copied == original

    for node in (0, 1):
        index = plan.node_index(node)
        named = set(index["weight_map"].values())  # type: ignore[union-attr]
        assert named == {o.path for o in plan.files_for_node(node)}
        experts = {expert_of(n) for n in index["weight_map"]} - {None}  # type: ignore[union-attr]
        assert experts == set(layout.node_experts(node, TINY_K3.num_experts))


def test_reshard_refuses_a_tensor_above_the_cap(tmp_path: Path) -> None:
    source = write_checkpoint(TINY_K3, tmp_path)
    headers = read_local_headers.fn(source, sorted(p.name for p in source.glob("*.safetensors")))
    with pytest.raises(PermanentError, match="cannot fit"):
        plan_reshard(headers, Layout(nodes=1, expert_parallel=1), num_experts=8, max_file_bytes=256 * 1024)


def test_header_with_a_hole_is_refused() -> None:
    header, _ = encode_header([("a", "U8", (4,)), ("b", "U8", (4,))])
    length = int.from_bytes(header[:8], "little")
    raw = json.loads(header[8 : 8 + length])
    raw["b"]["data_offsets"] = [5, 9]
    body = json.dumps(raw).encode()
    with pytest.raises(PermanentError, match="hole"):
        parse_header(len(body).to_bytes(8, "little") + body, what="x")


def test_generated_config_is_the_catalogs_tiny_k3(tmp_path: Path) -> None:
    config = json.loads((write_checkpoint(TINY_K3, tmp_path) / "config.json").read_text())
    parsed = model_from_hf_config(config, name="tiny-k3")
    catalog = get_model("tiny-k3")
    skip = {"provenance", "source"}
    assert parsed.model_dump(exclude=skip) == catalog.model_dump(exclude=skip)
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert set(index["weight_map"].values()) == {p.name for p in tmp_path.glob("*.safetensors")}
