"""The campaign's final ``vllm serve`` command lines, parsed by vLLM's own rules before anything is bought (pure).

The rollout renders each pod's arguments (``workload.pod_arguments``: the plan's flags, the served model name,
the catalog's recipe and ``serving.extra_args``); Kubernetes expands their ``$(VAR)`` references from the
container's environment (``references.expand``: ``serving.extra_env``, the endpoint key's Secret, the variables
LeaderWorkerSet injects); then vLLM parses them. An argument vLLM refuses makes it exit at start, on the paid
block, so preflight does all three now, with the parser and the snapshot of the image's vLLM version that the
sandbox's kubelet plays pods with (``capserve.core.vllm``, docs/serving.md §10).

What the rollout fills in at run time stands in with values of the same shape: the pinned revision (any 40 hex
digits: the path is the node's folder either way), the endpoint key (one token, ``--api-key=…``), the leader's
DNS name and the worker's index. A problem names the spec field and the flag, and says why without the value
the spec gave (a value can be a credential, and vLLM's own message repeats it).
"""

from __future__ import annotations

from collections.abc import Sequence

from capserve.core.errors import SpecError
from capserve.core.plain_env import flag_name, shown_flag
from capserve.core.planner.plan import ServingPlan
from capserve.core.rollout.args import API_KEY_ENV, canonical_flag
from capserve.core.rollout.config import RolloutConfig, rollout_config
from capserve.core.rollout.references import expand
from capserve.core.rollout.settings import RolloutSettings
from capserve.core.rollout.workload import pod_arguments
from capserve.core.spec import CampaignSpec
from capserve.core.vllm.parser import VllmArgsError, parse_serve_args
from capserve.core.vllm.versions import image_version
from capserve.core.weights.assembly import model_repo

PENDING_SHA = "0" * 40  # the revision is pinned after preflight; only the path's shape matters to the parser
VALUE = "<value>"


def stand_in_env(config: RolloutConfig) -> dict[str, str]:
    """The container environment the arguments are expanded with: the spec's and recipe's variables, and
    values of the right shape for what the rollout and LeaderWorkerSet set at run time."""
    return {
        **dict(config.engine.extra_env),
        API_KEY_ENV: "capserve-preflight-key",
        "LWS_LEADER_ADDRESS": "vllm-blue-0.vllm-blue.capserve-preflight",
        "LWS_WORKER_INDEX": "1",
        "LWS_GROUP_SIZE": str(config.layout.nodes_per_replica),
    }


def serve_command_lines(config: RolloutConfig, settings: RolloutSettings | None = None) -> dict[str, list[str]]:
    """Each role's arguments after ``vllm serve`` as the container gets them (``$(VAR)`` expanded)."""
    leader, worker = pod_arguments(config, settings or RolloutSettings())
    env = stand_in_env(config)
    lines = {"leader": [expand(word, env) for word in leader]}
    if worker:
        lines["worker"] = [expand(word, env) for word in worker]
    return lines


def command_problems(config: RolloutConfig, spec_args: Sequence[str], recipe_args: Sequence[str] = ()) -> list[str]:
    """Why vLLM would refuse the command line of a pod of ``config`` (empty: it would start), value-free."""
    problems = [
        f"serving.extra_args.{index}: holds a NUL byte, which no process argument can (execve(2) takes C strings); "
        "remove it"
        for index, token in enumerate(spec_args)
        if "\x00" in token
    ]
    if problems:
        return problems
    try:
        lines = serve_command_lines(config)
    except SpecError as exc:  # a spec argument that contradicts the plan (args.merge_extra_args)
        return [str(exc)]
    version, from_tag = image_version(config.image)
    for argv in lines.values():
        try:
            parse_serve_args(argv, version)
        except VllmArgsError as error:
            problem = _problem(error, argv, spec_args, recipe_args, version, from_tag)
            if problem not in problems:
                problems.append(problem)
    return problems


def serve_command_problems(plan: ServingPlan, spec: CampaignSpec) -> list[str]:
    """``command_problems`` for the campaign's spec and plan, before the revision is pinned."""
    try:
        config = rollout_config(
            plan, spec, model_repo=model_repo(spec.model), revision_sha=PENDING_SHA, node_bytes=plan.weight_bytes,
            splits_experts=False,
        )
    except SpecError as exc:
        return [str(exc)]
    spec_args = spec.serving.extra_args
    given = {canonical_flag(token) for token in spec_args}
    recipe_args = [token for token in config.engine.extra_args if canonical_flag(token) not in given]
    return command_problems(config, spec_args, recipe_args)


def _problem(
    error: VllmArgsError, argv: Sequence[str], spec_args: Sequence[str], recipe_args: Sequence[str], version: str,
    from_tag: bool,
) -> str:
    flag = error.flag
    name = canonical_flag(flag) if flag else None
    if name == "served-model-name":
        field = "serving.served_model_name"
    elif name is None or name in {canonical_flag(token) for token in spec_args}:
        field = "serving.extra_args"
    elif name in {canonical_flag(token) for token in recipe_args}:
        field = "the catalog's vLLM recipe (serving.recipe: false leaves it out)"
    else:
        field = "the rollout's own arguments (a capserve bug: please report it)"
    which = f"vLLM {version}" if from_tag else f"vLLM {version} (the newest snapshot: serving.image names no other)"
    about = f"{shown_flag(flag)}: " if flag else ""
    return (
        f"{field}: {which} refuses {about}{_without_values(error.reason, argv)}; `vllm serve` would exit "
        f"{error.exit_code} at start, on the paid block: fix or remove it"
    )


def _without_values(reason: str, argv: Sequence[str]) -> str:
    """``reason`` on one line, with every value of the command line replaced by ``<value>``."""
    values = {token.partition("=")[2] for token in argv if token.startswith("-") and "=" in token}
    values |= {token for token in argv if not token.startswith("-") or flag_name(token)[:1].isdigit()}
    text = reason
    for value in sorted((v for v in values if v), key=len, reverse=True):
        for quoted in (repr(value), f'"{value}"'):
            text = text.replace(quoted, VALUE)
        if len(value) >= 4:
            text = text.replace(value, VALUE)
    return " ".join(text.split())
