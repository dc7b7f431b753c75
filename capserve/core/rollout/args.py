"""The ``vllm serve`` arguments of every pod, derived from the plan in one function.

``vllm_args`` writes what the plan decides (layout, lengths, KV dtype, model folder, port, the API
key reference), then appends the extra arguments: the catalog's vLLM recipe for the model and GPU
family (``capserve.core.catalog.recipes``), composed with the spec's ``serving.extra_args`` by
``compose_extra_args``. Who wins:

- the plan over the recipe: the recipe's values for flags the plan owns (``--gpu-memory-utilization``,
  ``--kv-cache-dtype``, ``--max-model-len``, ``--max-num-seqs``) are not passed; its lengths are ceilings
  the plan check enforces before anything is bought (``plan_check.check_plan_against_recipe``);
- the spec over the recipe: a flag given in ``serving.extra_args`` replaces the recipe's same flag
  (``serving.recipe: false`` drops the recipe altogether);
- within the recipe, the GPU family's override over the layout's (the recipe's own last-wins rule).

An extra argument of the spec may add anything else, but it may neither repeat a flag nor touch one
the plan owns: ``merge_extra_args`` raises ``SpecError`` naming both sides, before anything runs.
The environment is composed the same way (``compose_env``): recipe, then ``serving.extra_env``; names the
rollout sets itself are refused (``ROLLOUT_ENV``).

Only flags vLLM 0.32's parser accepts are written (checked against its ``--help`` in the tests).
Values like ``$(LWS_LEADER_ADDRESS)`` are Kubernetes references: the kubelet substitutes the pod's
environment before the process starts (Kubernetes docs, "Define dependent environment variables").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog.hardware import GpuFamily
from capserve.core.catalog.recipes import ServingRecipe
from capserve.core.drain import vllm_shutdown_timeout_s
from capserve.core.errors import SpecError
from capserve.core.planner.plan import ParallelLayout
from capserve.core.rollout.layout import launch_mode
from capserve.core.rollout.settings import RolloutSettings
from capserve.core.vllm.parser import is_option, long_flag

API_KEY_ENV = "VLLM_API_KEY"
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"  # <lws>-<group>.<lws>.<namespace>: the leader pod's DNS name
WORKER_INDEX = "$(LWS_WORKER_INDEX)"  # 0 on the leader, 1..size-1 on the workers

# vLLM's short spellings (from `vllm serve --help`), mapped to the long flag they stand for.
ALIASES = {
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "dp": "data-parallel-size",
    "dpl": "data-parallel-size-local",
    "dpa": "data-parallel-address",
    "dpp": "data-parallel-rpc-port",
    "dpr": "data-parallel-start-rank",
    "dpb": "data-parallel-backend",
    "dpn": "data-parallel-rank",
    "dph": "data-parallel-hybrid-lb",
    "dpe": "data-parallel-external-lb",
    "dpm": "data-parallel-multi-port-external-lb",
    "ep": "enable-expert-parallel",
    "n": "nnodes",
    "r": "node-rank",
    "asc": "api-server-count",
    "pcp": "prefill-context-parallel-size",
    "dcp": "decode-context-parallel-size",
    "q": "quantization",
}

# Flags the plan (or the rollout) decides: an extra argument naming one contradicts the plan even
# when this particular pod's arguments leave it at vLLM's default.
OWNED = frozenset(
    {
        "model",
        "served-model-name",
        "host",
        "port",
        "api-key",
        "tensor-parallel-size",
        "pipeline-parallel-size",
        "data-parallel-size",
        "data-parallel-size-local",
        "data-parallel-address",
        "data-parallel-rpc-port",
        "data-parallel-start-rank",
        "data-parallel-backend",
        "data-parallel-rank",
        "data-parallel-hybrid-lb",
        "data-parallel-external-lb",
        "data-parallel-multi-port-external-lb",
        "enable-expert-parallel",
        "distributed-executor-backend",
        "nnodes",
        "node-rank",
        "master-addr",
        "master-port",
        "headless",
        "api-server-count",
        "max-model-len",
        "max-num-seqs",
        "kv-cache-dtype",
        "gpu-memory-utilization",
        "shutdown-timeout",
    }
)


class EngineOptions(BaseModel):
    """What the plan and the spec say about the engine, beyond the layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    served_model_name: str = Field(min_length=1, max_length=200, description="--served-model-name.")
    max_model_len: int = Field(ge=1, le=16 * 1024 * 1024, description="--max-model-len: the plan's context.")
    max_num_seqs: int = Field(ge=1, le=65_536, description="Sequences the plan holds at once, over all DP ranks.")
    kv_cache_dtype: Literal["auto", "fp8"] = Field(description="--kv-cache-dtype the plan's KV budget assumed.")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="--gpu-memory-utilization the plan assumed.")
    extra_args: tuple[str, ...] = Field(
        default=(), max_length=128, description="The recipe's arguments composed with serving.extra_args."
    )
    extra_env: tuple[tuple[str, str], ...] = Field(
        default=(), max_length=128, description="The recipe's environment composed with serving.extra_env."
    )


Role = Literal["leader", "worker"]


def vllm_args(
    layout: ParallelLayout,
    engine: EngineOptions,
    *,
    role: Role,
    model_path: str,
    settings: RolloutSettings | None = None,
    worker_rank: int | str = WORKER_INDEX,
) -> list[str]:
    """The full argument list (after ``vllm serve``) of the leader or of the workers of one group.

    The leader (LWS worker index 0) serves the API and takes the API key from ``$(VLLM_API_KEY)``;
    workers run ``--headless`` (no HTTP) and join the leader at ``$(LWS_LEADER_ADDRESS)``.
    ``worker_rank`` is the workers' node rank: ``$(LWS_WORKER_INDEX)`` for TP×PP across nodes, a
    number where vLLM needs arithmetic on it (the data-parallel start rank).
    """
    settings = settings or RolloutSettings()
    nodes, mode = layout.nodes_per_replica, launch_mode(layout)
    if role == "worker" and nodes == 1:
        raise ValueError("a single-node layout has no workers")
    args = [
        "--model",
        model_path,
        "--served-model-name",
        engine.served_model_name,
        "--port",
        str(settings.port),
        "--tensor-parallel-size",
        str(layout.tensor_parallel),
    ]
    if layout.pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(layout.pipeline_parallel)]
    if layout.data_parallel > 1:
        args += [
            "--data-parallel-size",
            str(layout.data_parallel),
            "--data-parallel-size-local",
            str(layout.data_parallel_local),
        ]
    if layout.enable_expert_parallel:
        args.append("--enable-expert-parallel")
    if mode == "multi-node-tp-pp":
        rank = "0" if role == "leader" else str(worker_rank)
        args += [
            "--nnodes",
            str(nodes),
            "--node-rank",
            rank,
            "--master-addr",
            LEADER_ADDRESS,
            "--master-port",
            str(settings.master_port),
        ]
    elif mode == "multi-node-dp":
        args += [
            "--data-parallel-address",
            LEADER_ADDRESS,
            "--data-parallel-rpc-port",
            str(settings.data_parallel_rpc_port),
        ]
        if role == "worker":
            if not isinstance(worker_rank, int):
                raise ValueError("data-parallel workers need a numeric node rank (their start rank is derived)")
            args += ["--data-parallel-start-rank", str(worker_rank * layout.data_parallel_local)]
    if role == "worker":
        args.append("--headless")
    args += [
        "--max-model-len",
        str(engine.max_model_len),
        # vLLM counts --max-num-seqs per data-parallel rank; the plan holds max_num_seqs in total.
        "--max-num-seqs",
        str(math.ceil(engine.max_num_seqs / layout.data_parallel)),
        "--kv-cache-dtype",
        engine.kv_cache_dtype,
        "--gpu-memory-utilization",
        f"{engine.gpu_memory_utilization:g}",
        # In-flight requests finish on SIGTERM (vLLM's default, 0, aborts them) and the process still exits within
        # the pod's terminationGracePeriodSeconds, inside the drain's stop (docs/serving.md §3).
        "--shutdown-timeout",
        str(vllm_shutdown_timeout_s(settings.termination_grace_s)),
    ]
    if role == "leader":
        # On the command line, not only in the environment: the Rust frontend honours the flag and
        # probably not VLLM_API_KEY (docs/serving.md §6). The manifest carries only the reference. One token,
        # ``--api-key=<key>``: as two, a key that begins with "-" is read by argparse as the next flag, and vLLM
        # exits 2 ("argument --api-key: expected one argument") on every start.
        args += [f"--api-key=$({API_KEY_ENV})"]
    return merge_extra_args(args, engine.extra_args)


def _flag(token: str) -> tuple[str, str | None] | None:
    """``--flag`` / ``-f`` / ``--flag=value`` → (canonical long name, inline value); None for a value token."""
    if not is_option(token):
        return None
    name, _, inline = token.lstrip("-").partition("=")
    name = ALIASES.get(name, name)
    # vLLM's parser accepts underscores for dashes in flag names (FlexibleArgumentParser), and an unambiguous
    # abbreviation for its flag (argparse's default: --max-model is --max-model-len; capserve.core.vllm.long_flag).
    head, dot, rest = name.partition(".")
    head = head.replace("_", "-")
    if token.startswith("--"):
        head = (long_flag(f"--{head}") or f"--{head}")[2:]
    return head + dot + rest, (inline if "=" in token else None)


def canonical_flag(token: str) -> str | None:
    """A flag's long name as vLLM reads it (``-tp`` → ``tensor-parallel-size``, ``--max_model_len`` →
    ``max-model-len``, ``--no-x`` → ``x``); None for a value."""
    flag = _flag(token)
    return flag[0].removeprefix("no-") if flag is not None else None


def _parse(args: Sequence[str], what: str) -> list[tuple[str, str, str]]:
    """(canonical flag, as written, value text) for every flag; positional tokens are refused."""
    parsed: list[tuple[str, str, str]] = []
    for token in args:
        flag = _flag(token)
        if flag is not None:
            name, inline = flag
            positive = name.removeprefix("no-")
            if positive != name:  # --no-enable-expert-parallel is the same flag as --enable-expert-parallel
                parsed.append((positive, token, "false"))
            else:
                parsed.append((name, token, inline or ""))
        elif parsed:
            name, written, value = parsed[-1]
            parsed[-1] = (name, written, f"{value} {token}".strip())
        else:
            raise SpecError(
                f"{what}: {token!r} is not a flag; the model is not given here (the rollout passes the node's "
                "staged folder as --model): start every argument with '--'"
            )
    return parsed


def _shown(written: str, value: str) -> str:
    return f"{written} {value}".strip() if "=" not in written else written


def _groups(args: Sequence[str], what: str) -> list[tuple[str, list[str]]]:
    """(canonical flag, its tokens: the flag and its values) for every flag, in order."""
    groups: list[tuple[str, list[str]]] = []
    for token in args:
        flag = _flag(token)
        if flag is not None:
            groups.append((flag[0].removeprefix("no-"), [token]))
        elif groups:
            groups[-1][1].append(token)
        else:
            raise SpecError(f"{what}: {token!r} is not a flag: start every argument with '--'")
    return groups


def _last_wins(groups: Sequence[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    last = {name: index for index, (name, _) in enumerate(groups)}
    return [group for index, group in enumerate(groups) if last[group[0]] == index]


def recipe_arguments(
    recipe: ServingRecipe | None, *, family: GpuFamily, layout: ParallelLayout, kv_cache_dtype: str
) -> tuple[list[str], list[tuple[str, str]]]:
    """The recipe's arguments and environment for this GPU family, layout and KV dtype (none without a recipe).

    Order as the recipe builds its command: base and feature arguments, the layout's, the family's
    (a later one of the same flag wins), then the fp8-KV attention config when the plan's KV cache is fp8.
    """
    if recipe is None:
        return [], []
    parts = [recipe.args]
    env: list[tuple[str, str]] = []
    if launch_mode(layout) == "multi-node-tp-pp":
        parts.append(recipe.multi_node_tp_pp.args)
        env += recipe.multi_node_tp_pp.env
    family_override = recipe.families.get(family)
    if family_override is not None:
        parts.append(family_override.args)
        env += family_override.env
    if kv_cache_dtype == "fp8":
        parts.append(recipe.fp8_kv_args)
    groups = _groups([token for part in parts for token in part], f"the {recipe.model} recipe")
    owned = [name for name, _ in groups if name in OWNED]
    if owned:  # the catalog keeps these as ceilings, never as arguments (catalog/recipes.py)
        raise ValueError(f"the {recipe.model} recipe passes flags the plan owns: {owned}")
    args = [token for _, tokens in _last_wins(groups) for token in tokens]
    return args, list(dict(env).items())


def compose_extra_args(recipe: Sequence[str], spec: Sequence[str]) -> list[str]:
    """The recipe's arguments, less those the spec's ``serving.extra_args`` gives again, then the spec's."""
    given = {name for name, _ in _groups(spec, "serving.extra_args")}
    kept = [token for name, tokens in _groups(recipe, "the recipe") if name not in given for token in tokens]
    return [*kept, *spec]


# Environment variables the rollout sets on the vLLM container itself (workload.py, cache.py, secret.py)
# or that LeaderWorkerSet injects (its pod webhook): serving.extra_env may not set them.
ROLLOUT_ENV = frozenset(
    {
        API_KEY_ENV,
        "VLLM_HOST_IP",
        "HF_HUB_OFFLINE",
        "VLLM_ENGINE_READY_TIMEOUT_S",
        "NCCL_DEBUG",
        "FI_PROVIDER",
        "FI_EFA_USE_DEVICE_RDMA",
        "VLLM_CACHE_ROOT",
        "FLASHINFER_WORKSPACE_BASE",
        "CUDA_CACHE_PATH",
        "CUDA_CACHE_MAXSIZE",
        "LWS_LEADER_ADDRESS",
        "LWS_GROUP_SIZE",
        "LWS_WORKER_INDEX",
    }
)


def compose_env(recipe: Sequence[tuple[str, str]], spec: Mapping[str, str]) -> list[tuple[str, str]]:
    """The recipe's environment with ``serving.extra_env`` over it (the spec's value wins for a name).

    Raises SpecError for a name the rollout sets itself.
    """
    taken = sorted(set(spec) & ROLLOUT_ENV)
    if taken:
        raise SpecError(
            f"serving.extra_env sets {taken}, which the rollout sets itself (the pod's address, the startup "
            "budget, NCCL's log level, EFA, the cache folders, the API key, LeaderWorkerSet's variables): "
            "remove them from serving.extra_env"
        )
    return list({**dict(recipe), **dict(spec)}.items())


def merge_extra_args(derived: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``derived`` followed by ``extra``, refusing an extra flag that repeats or overrides the plan's.

    Raises SpecError naming the extra argument and what the plan sets (or that the plan owns it).
    """
    ours = {name: (written, value) for name, written, value in _parse(derived, "derived arguments")}
    seen: dict[str, str] = {}
    for name, written, value in _parse(extra, "serving.extra_args"):
        given = _shown(written, value)
        if name in seen:
            raise SpecError(f"serving.extra_args gives {name!r} twice: {seen[name]!r} and {given!r}; keep one")
        seen[name] = given
        if name in ours:
            planned = _shown(*ours[name])
            raise SpecError(
                f"serving.extra_args gives {given!r}, but the rollout already sets {planned!r} from the plan; "
                "remove it from serving.extra_args (change the plan or the serving spec instead)"
            )
        if name in OWNED:
            raise SpecError(
                f"serving.extra_args gives {given!r}, but {name!r} is decided by the plan and the rollout "
                "(left unset for this layout on purpose); remove it from serving.extra_args"
            )
    return [*derived, *extra]
