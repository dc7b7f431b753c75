"""`vllm serve` arguments checked the way vLLM's own parser checks them, from a committed snapshot per version.

The snapshots (``data/<version>/serve_flags.json``) are generated from the real parser by
``scripts/snapshot_vllm_flags.py`` and compared with it by ``tests/sandbox/test_vllm_flags.py``
wherever ``.venv-vllm`` exists. Here one is turned back into an ``argparse`` parser, after the same
rewriting vLLM's ``FlexibleArgumentParser`` does before parsing (vllm/utils/argparse_utils.py):

- ``--model X`` is moved to the positional ``model_tag`` (and ``--served-model-name`` without any
  model is an error);
- underscores in flag names become dashes (``--max_model_len`` = ``--max-model-len``);
- ``-O3`` / ``-O 3`` mean ``--optimization-level 3``;
- dotted JSON flags (``--compilation-config.mode 3``) are merged into one JSON value.

Flag names are case-sensitive, and an unambiguous abbreviation stands for its flag (``--api-k`` is ``--api-key``):
argparse's default, which vLLM keeps (no ``allow_abbrev=False`` anywhere in vLLM 0.32; measured with its parser).
``long_flag`` says which flag a word stands for, so the secret rule and the plan's own flags see through it.
Errors are argparse's (exit code 2, "usage:" then "vllm serve: error: ..."); the cross-flag checks of
``validate_parsed_serve_args`` and the parser-name lookups raise like vLLM does (exit code 1), from the
rules snapshot vLLM's own code produced (``rules.py``). Each error also names the flag it is about and says
why without the value (``VllmArgsError.flag`` / ``reason``): preflight quotes that, never vLLM's line, which
repeats what it was given. What is not modelled: ``--config`` files, and every check that needs the model
or a GPU (docs/serving.md §10).

Used twice: by preflight, on the campaign's final command line before anything is bought, and by the
sandbox's kubelet when a pod runs ``vllm serve``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NoReturn

from capserve.core.vllm.rules import VllmStartupError, check_startup
from capserve.core.vllm.versions import newest_version, snapshot_file

USAGE = "usage: vllm serve [model_tag] [options]"
TOP_USAGE = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."


class VllmArgsError(Exception):
    """What vLLM prints and its exit code when it refuses its arguments; the flag at fault and why, value-free."""

    def __init__(self, lines: list[str], exit_code: int, *, flag: str | None = None, reason: str = "") -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.exit_code = exit_code
        self.flag = flag  # as written on the command line (None: no one flag is at fault)
        self.reason = reason  # argparse's or vLLM's words, without the value given


@dataclass(frozen=True)
class ServeArgs:
    """The parsed arguments the sandbox needs (every parsed value is in ``values``)."""

    model: str
    version: str  # the vLLM whose snapshot parsed them
    values: dict[str, Any] = field(repr=False)
    non_default: dict[str, Any] = field(repr=False)

    def get(self, dest: str, default: Any = None) -> Any:
        return self.values.get(dest, default)

    @property
    def served_model_names(self) -> list[str]:
        names = self.values.get("served_model_name")
        return list(names) if names else [self.model]

    @property
    def api_keys(self) -> list[str]:
        keys = self.values.get("api_key")
        return [k for k in keys if k] if keys else []

    @property
    def port(self) -> int:
        return int(self.values.get("port") or 8000)

    @property
    def headless(self) -> bool:
        return bool(self.values.get("headless"))

    @property
    def nnodes(self) -> int:
        return int(self.values.get("nnodes") or 1)

    @property
    def node_rank(self) -> int:
        return int(self.values.get("node_rank") or 0)

    def sizes(self) -> dict[str, Any]:
        """The layout every node of one server must agree on."""
        keys = (
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "data_parallel_size",
            "enable_expert_parallel",
            "nnodes",
            "max_model_len",
        )
        return {key: self.values.get(key) for key in keys}


# ---------------------------------------------------------------- the snapshot


@cache
def snapshot(version: str | None = None) -> dict[str, Any]:
    """The flags snapshot of vLLM ``version`` (default: the newest the repository holds)."""
    data: dict[str, Any] = json.loads(snapshot_file(version or newest_version(), "serve_flags.json"))
    return data


_ARGUMENT_ERROR = re.compile(r"^argument (?P<flags>\S+): (?P<reason>.*)$", re.DOTALL)
_AMBIGUOUS = re.compile(r"^ambiguous option: (?P<option>.+?) could match (?P<matches>.*)$", re.DOTALL)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse names an option by all its spellings ("-tp/--tensor-parallel-size"): keep the long one.
        found = _ARGUMENT_ERROR.match(message)
        flag = max(found["flags"].split("/"), key=len) if found else None
        reason = found["reason"] if found else message
        ambiguous = _AMBIGUOUS.match(message)
        if ambiguous:  # argparse quotes the word whole, "=value" included: name the flag part only
            flag = ambiguous["option"].partition("=")[0]
            reason = f"ambiguous option: could match {ambiguous['matches']}"
        raise VllmArgsError([USAGE, f"vllm serve: error: {message}"], 2, flag=flag, reason=reason)


def _human_readable_int(value: str) -> int:
    """vllm.utils.argparse_utils.human_readable_int: 1k = 1,000; 1K = 1,024; 25.6k = 25,600."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            )
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(value)


def _converter(described: dict[str, Any]) -> Callable[[str], Any]:
    kind = described["kind"]
    if kind == "int":
        return int
    if kind == "float":
        return float
    if kind in ("str", "any"):
        return str
    if kind == "json":

        def loads(value: str) -> Any:
            return json.loads(value)

        return loads
    if kind == "human_readable_int":

        def human_readable_int(value: str) -> int:
            return _human_readable_int(value)

        return human_readable_int
    if kind == "human_readable_int_or_auto":

        def human_readable_int_or_auto(value: str) -> int:
            return -1 if value.strip() in ("-1",) or value.strip().lower() == "auto" else _human_readable_int(value)

        return human_readable_int_or_auto
    if kind == "lower_underscore":
        return lambda value: value.lower().replace("-", "_")
    if kind == "dict_or_str":

        def union_dict_and_str(value: str) -> Any:
            return json.loads(value) if re.match(r"(?s)^\s*{.*}\s*$", value) else value

        return union_dict_and_str
    if kind == "optional":
        inner = _converter(described["inner"])

        def _optional_type(value: str) -> Any:
            return None if value in ("", "None") else _parse(inner, value)

        return _optional_type
    if kind == "parse":
        inner = _converter(described["inner"])

        def _parse_type(value: str) -> Any:
            return _parse(inner, value)

        return _parse_type
    if kind == "dataclass":
        return _dataclass_converter(described["name"], set(described["fields"]))
    raise ValueError(f"unknown converter kind {kind!r} in the vLLM flag snapshot")


def _parse(inner: Callable[[str], Any], value: str) -> Any:
    try:
        return inner(value)
    except ValueError as exc:
        name = getattr(inner, "__name__", "value")
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to <class '{name}'>.") from exc


def _dataclass_converter(name: str, fields: set[str]) -> Callable[[str], Any]:
    def parse_dataclass(value: str) -> Any:
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"1 validation error for {name}\n  Invalid JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError(f"1 validation error for {name}\n  Input should be an object")
        unknown = sorted(set(parsed) - fields) if fields else []
        if unknown:
            raise argparse.ArgumentTypeError(
                f"{len(unknown)} validation error for {name}\n"
                + "\n".join(
                    f"{key}\n  Unexpected keyword argument [type=unexpected_keyword_argument]" for key in unknown
                )
            )
        return parsed

    return parse_dataclass


@cache
def _parser(version: str) -> _Parser:
    parser = _Parser(prog="vllm serve", usage="vllm serve [model_tag] [options]", add_help=False)
    for option in snapshot(version)["options"]:
        flags = option["flags"]
        if not flags:
            parser.add_argument("model_tag", nargs="?", default=None)
            continue
        kwargs: dict[str, Any] = {"dest": option["dest"]}
        shape = option["shape"]
        if shape == "boolean_optional":
            # The snapshot lists --x and --no-x; argparse makes --no-x itself from --x.
            parser.add_argument(
                *[f for f in flags if not f.startswith("--no-")], action=argparse.BooleanOptionalAction, **kwargs
            )
            continue
        if shape == "flag":
            parser.add_argument(*flags, action="store_true", **kwargs)
            continue
        if shape == "append":
            kwargs["action"] = "append"
        if option["nargs"] is not None:
            kwargs["nargs"] = option["nargs"]
        if option.get("bare_ok"):
            kwargs["const"] = True
        kwargs["type"] = _converter(option["type"])
        if option["choices"] is not None:
            kwargs["choices"] = option["choices"]
        parser.add_argument(*flags, **kwargs)
    return parser


@cache
def _option_strings(version: str) -> frozenset[str]:
    return frozenset(flag for option in snapshot(version)["options"] for flag in option["flags"])


def is_option(token: str) -> bool:
    """Whether argparse reads ``token`` as an option string rather than a value: it starts with ``-`` and is not a
    number (argparse's ``_negative_number_matcher``: vLLM declares no option that looks like a negative number, so
    ``-1`` is a value)."""
    if not token.startswith("-"):
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def long_flag(token: str, version: str | None = None) -> str | None:
    """The flag of vLLM's parser a ``--word`` stands for: itself, with ``_`` read as ``-`` in its name (dotted keys
    aside), or the one flag it abbreviates (argparse: an option string that starts with the word before ``=``).
    None when it names no flag, or several (argparse: "ambiguous option")."""
    if not token.startswith("--"):
        return None
    head = token.partition("=")[0].partition(".")[0]
    word = "--" + head[2:].replace("_", "-")
    flags = _option_strings(version or newest_version())
    if word in flags:
        return word
    matches = [flag for flag in flags if flag.startswith(word)]
    return matches[0] if len(matches) == 1 else None


# ---------------------------------------------------------------- FlexibleArgumentParser's rewriting


def _rewrite(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    model_at = next((i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None)
    if model_at is not None:
        if args[model_at] == "--model":
            if model_at + 1 >= len(args):
                raise VllmArgsError([USAGE, "vllm serve: error: argument --model: expected one argument"], 2,
                                    flag="--model", reason="expected one argument")
            tag, rest = args[model_at + 1], model_at + 2
        else:
            tag, rest = args[model_at].removeprefix("--model="), model_at + 1
        args = [tag, *args[:model_at], *args[rest:]]
    if args and args[0].startswith("-") and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", arg) for arg in args):
        raise VllmArgsError(
            [
                "ValueError: `model` should be provided as the first positional argument when using "
                "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
            ],
            1,
            flag="--served-model-name",
            reason="`model` should be provided as the first positional argument",
        )
    if "--config" in args:
        raise VllmArgsError(["capserve: vLLM --config files are not modelled (docs/serving.md §10)"], 1,
                            flag="--config", reason="a --config file is not modelled: give its flags as arguments")

    name = re.compile(r"(?<=--)[^\.]*")
    processed: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            if "=" in arg:
                key, given = arg.split("=", 1)
                processed.append(f"{name.sub(lambda m: m.group(0).replace('_', '-'), key, count=1)}={given}")
            else:
                processed.append(name.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1))
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)

    dotted: dict[str, dict[str, Any]] = {}
    skip: set[int] = set()
    out: list[str] = []
    for i, arg in enumerate(processed):
        if i in skip:
            continue
        if arg.startswith("-") and "." in arg.split("=", 1)[0]:
            if "=" in arg:
                key, raw = arg.split("=", 1)
            elif i + 1 < len(processed):
                key, raw = arg, processed[i + 1]
                skip.add(i + 1)
            else:
                raise VllmArgsError([USAGE, f"vllm serve: error: argument {arg}: expected one argument"], 2,
                                    flag=arg, reason="expected one argument")
            if key.endswith("+"):
                key, raw = key[:-1], json.dumps(raw.split(","))
            flag, *path = key.split(".")
            parsed: Any
            try:
                parsed = json.loads(raw)
            except ValueError:
                try:
                    parsed = _human_readable_int(raw)
                except (ValueError, argparse.ArgumentTypeError):
                    parsed = raw
            target = dotted.setdefault(flag, {})
            for part in path[:-1]:
                target = target.setdefault(part, {})
            previous = target.get(path[-1])
            target[path[-1]] = previous + parsed if isinstance(previous, list) and isinstance(parsed, list) else parsed
            continue
        out.append(arg)
    for flag, merged in dotted.items():
        out += [flag, json.dumps(merged)]
    return out


# ---------------------------------------------------------------- entry point


def parse_serve_args(argv: Sequence[str], version: str | None = None) -> ServeArgs:
    """Parse what follows ``vllm serve`` as vLLM ``version`` would (default: the newest snapshot); raises
    ``VllmArgsError`` as vLLM would fail."""
    version = version or newest_version()
    parser = _parser(version)
    namespace, extras = parser.parse_known_args(_rewrite(argv))
    if extras:
        # argparse's own words (parse_args), printed by vLLM's top-level parser.
        stray = next((word for word in extras if word.startswith("-")), None)
        raise VllmArgsError(
            [TOP_USAGE, f"vllm: error: unrecognized arguments: {' '.join(extras)}"],
            2,
            flag=stray.partition("=")[0] if stray else None,
            reason="unrecognized argument (flag names are case-sensitive: `vllm serve --help` lists them)"
            if stray
            else "a value no flag takes",
        )
    values = vars(namespace)
    defaults = vars(parser.parse_args([]))
    non_default = {k: v for k, v in values.items() if v != defaults.get(k)}
    model = values.get("model_tag") or "Qwen/Qwen3-0.6B"  # vLLM's default model when none is named
    try:
        check_startup(values, version)  # vLLM's own cross-flag rules and parser names (rules.py)
    except VllmStartupError as error:
        raise VllmArgsError([str(error)], 1, flag=error.flag, reason=str(error)) from None
    nnodes, rank = int(values.get("nnodes") or 1), int(values.get("node_rank") or 0)
    if not 0 <= rank < nnodes:
        why = f"node_rank {rank} must be in [0, {nnodes}) (nnodes={nnodes})"
        raise VllmArgsError([f"ValueError: {why}"], 1, flag="--node-rank", reason=why)
    world = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        world *= int(values.get(key) or 1)
    if nnodes > 1 and world % nnodes:
        why = f"world size {world} (TP x PP x DP) is not divisible by nnodes {nnodes}"
        raise VllmArgsError([f"ValueError: {why}"], 1, flag="--nnodes", reason=why)
    return ServeArgs(model=str(model), version=version, values=values, non_default=non_default)


def serve_argv(command: Sequence[str], args: Sequence[str], env: dict[str, str] | None = None) -> list[str] | None:
    """The arguments after ``vllm serve`` in a container's command + args, or None if it does not run it.

    Recognised: ``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server ...``, the image's
    default entrypoint (the vllm/vllm-openai images run the API server with the container args), and a
    ``sh -c`` script whose ``vllm serve`` line is split as the shell would (``$VAR`` from ``env``).
    """
    full = [*command, *args]
    if len(full) >= 3 and full[0].rsplit("/", 1)[-1] in ("sh", "bash") and full[1] == "-c":
        full = _shell_words(full[2], env or {})
    for i, word in enumerate(full[:-1]):
        if word.rsplit("/", 1)[-1] == "vllm" and full[i + 1] == "serve":
            return full[i + 2 :]
    for i, word in enumerate(full[:-1]):
        if word == "-m" and full[i + 1] in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main"):
            rest = full[i + 2 :]
            return rest[1:] if rest[:1] == ["serve"] else rest
    if not command:
        return list(args)
    return None


def _shell_words(script: str, env: dict[str, str]) -> list[str]:
    """The words of the script's command that runs vllm (``$VAR``/``${VAR}`` expanded, like sh would)."""
    import shlex

    def expand(match: re.Match[str]) -> str:
        return env.get(match.group(1) or match.group(2), "")

    for line in re.split(r"\n|;|&&|\|\|", script):
        expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, line.replace("\\\n", " "))
        words = shlex.split(expanded, comments=True)
        if words and words[0] == "exec":
            words = words[1:]
        if any(word.rsplit("/", 1)[-1] == "vllm" for word in words[:1]) or "-m" in words[:3]:
            return words
    return []
