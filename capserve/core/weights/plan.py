"""The per-node weights plan: which files and bytes each node needs, from the file listing and headers only.

Dense tensors (attention, norms, router, shared experts, embeddings) go to every node; routed expert
tensors go to the node whose EP ranks own the expert (``placement``). Files that are not weights
(config, tokenizer, ...) go everywhere. The repo's own ``model.safetensors.index.json`` is replaced by a
per-node index: vLLM 0.33 refuses an index that names a file the directory lacks
(``filter_duplicate_safetensors_files`` raises FileNotFoundError; docs/weights.md §4.3).

When every file a node needs also carries tensors it does not need (source shards are layer-ordered,
so each holds experts of every rank), the plan asks for a re-shard (``reshard``) and the per-node bytes
are the tensor bytes the node really uses; without it, whole files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import PermanentError
from capserve.core.weights.listing import SHA1_HEX, RepoFile, RepoListing
from capserve.core.weights.placement import Layout, expert_of
from capserve.core.weights.safetensors import TensorEntry

INDEX_NAME = "model.safetensors.index.json"


class NodePlan(BaseModel):
    """What one node needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: int = Field(ge=0, le=63, description="Node index, 0-based, in EP rank order.")
    experts_start: int = Field(ge=0, description="First routed expert this node holds.")
    experts_stop: int = Field(ge=0, description="One past the last routed expert this node holds.")
    weight_files: tuple[str, ...] = Field(description="Source safetensors files holding a tensor this node needs.")
    tensor_bytes: int = Field(ge=0, description="Bytes of the tensors this node needs (dense + its experts).")
    whole_file_bytes: int = Field(ge=0, description="Bytes of every whole file this node needs, weights and others.")


class WeightsPlan(BaseModel):
    """The plan for one (repo, sha, layout); JSON-serialisable, the single source of truth downstream."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name'.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="Pinned commit sha.")
    layout: Layout = Field(description="Nodes and expert-parallel size the plan is for.")
    num_experts: int = Field(ge=0, le=1_000_000, description="Routed experts per MoE layer (0 for a dense model).")
    tensors: int = Field(ge=0, description="Tensors in the checkpoint.")
    files: tuple[RepoFile, ...] = Field(
        description="Every file to fetch: the indexed weights and the non-weight files."
    )
    aux_files: tuple[str, ...] = Field(description="Non-weight files every node gets (config, tokenizer, ...).")
    reshard: bool = Field(description="True when per-rank expert files would save bytes on some node.")
    node_plans: tuple[NodePlan, ...] = Field(description="One entry per node.")

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def bytes_naive_per_node(self) -> int:
        """What each node would stage if it got everything."""
        return self.bytes_total

    @property
    def aux_bytes(self) -> int:
        sizes = {f.path: f.size for f in self.files}
        return sum(sizes[p] for p in self.aux_files)

    @property
    def bytes_per_node(self) -> list[int]:
        """Planned bytes per node: its tensors (+ other files) after a re-shard, else its whole files.

        Re-sharded files add a small JSON header each; the manifest has the exact sizes.
        """
        if self.reshard:
            return [self.aux_bytes + n.tensor_bytes for n in self.node_plans]
        return [n.whole_file_bytes for n in self.node_plans]


def infer_num_experts(tensors_by_file: Mapping[str, Sequence[TensorEntry]]) -> int:
    """Experts per layer from the tensor names (highest expert id + 1); 0 for a dense checkpoint."""
    highest = -1
    for entries in tensors_by_file.values():
        for t in entries:
            expert = expert_of(t.name)
            if expert is not None and expert > highest:
                highest = expert
    return highest + 1


def plan_weights(
    listing: RepoListing,
    tensors_by_file: Mapping[str, Sequence[TensorEntry]],
    layout: Layout,
    *,
    num_experts: int | None = None,
) -> WeightsPlan:
    """Plan which files and bytes each node needs. ``tensors_by_file`` covers the indexed safetensors files."""
    sizes = {f.path: f for f in listing.files}
    missing = sorted(set(tensors_by_file) - set(sizes))
    if missing:
        raise PermanentError(
            f"{listing.repo}@{listing.revision_sha}: the index names files the repo does not have: {missing[:5]}"
        )
    experts = infer_num_experts(tensors_by_file) if num_experts is None else num_experts
    if layout.splits_experts and experts == 0:
        raise PermanentError(
            f"{listing.repo}: expert_parallel={layout.expert_parallel} over {layout.nodes} nodes, "
            "but the checkpoint has no routed expert tensors ('.experts.<id>.'): use expert_parallel=1"
        )
    aux = tuple(
        f.path for f in listing.files if not f.is_safetensors and f.path != INDEX_NAME and not f.path.startswith(".")
    )
    aux_bytes = sum(sizes[p].size for p in aux)

    needed_bytes = [0] * layout.nodes
    files_of_node: list[set[str]] = [set() for _ in range(layout.nodes)]
    total_tensors = 0
    for path, entries in tensors_by_file.items():
        for t in entries:
            total_tensors += 1
            expert = expert_of(t.name)
            if expert is None:
                owners: Sequence[int] = range(layout.nodes)
            elif expert >= experts:
                raise PermanentError(f"{path}: tensor {t.name!r} names expert {expert}, the model has {experts}")
            else:
                owners = (layout.node_of_expert(expert, experts),)
            for node in owners:
                needed_bytes[node] += t.nbytes
                files_of_node[node].add(path)

    node_plans = []
    for node in range(layout.nodes):
        held = layout.node_experts(node, experts)
        weight_files = tuple(sorted(files_of_node[node]))
        node_plans.append(
            NodePlan(
                node=node,
                experts_start=held.start,
                experts_stop=held.stop,
                weight_files=weight_files,
                tensor_bytes=needed_bytes[node],
                whole_file_bytes=aux_bytes + sum(sizes[p].size for p in weight_files),
            )
        )
    # Whole files carry headers the tensor bytes do not count: compare the tensors a node gets with
    # whole files against the tensors it needs.
    reshard = any(sum(_data_bytes(tensors_by_file[p]) for p in n.weight_files) > n.tensor_bytes for n in node_plans)
    fetched = tuple(sizes[p] for p in sorted(set(aux) | set(tensors_by_file) | ({INDEX_NAME} & set(sizes))))
    return WeightsPlan(
        repo=listing.repo,
        revision_sha=listing.revision_sha,
        layout=layout,
        num_experts=experts,
        tensors=total_tensors,
        files=fetched,
        aux_files=aux,
        reshard=reshard,
        node_plans=tuple(node_plans),
    )


def _data_bytes(entries: Sequence[TensorEntry]) -> int:
    return sum(t.nbytes for t in entries)


def index_document(weight_map: Mapping[str, str], tensor_bytes: int) -> dict[str, object]:
    """A ``model.safetensors.index.json`` body: ``{"metadata": {"total_size"}, "weight_map"}``; docs/weights.md §1.2."""
    return {"metadata": {"total_size": tensor_bytes}, "weight_map": dict(sorted(weight_map.items()))}


def node_index_whole_files(
    plan: WeightsPlan, tensors_by_file: Mapping[str, Sequence[TensorEntry]], node: int
) -> dict[str, object]:
    """The node's index when it stages whole source files: every tensor of the files it has, nothing else."""
    files = plan.node_plans[node].weight_files
    weight_map = {t.name: path for path in files for t in tensors_by_file[path]}
    return index_document(weight_map, sum(_data_bytes(tensors_by_file[p]) for p in files))
