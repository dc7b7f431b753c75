"""vLLM's cross-flag rules and its ``tool_choice: "auto"`` refusal, from a snapshot vLLM's own code produced.

The snapshot (``data/<version>/serve_rules.json``) is written by ``scripts/snapshot_vllm_rules.py``, which
runs vLLM's checks rather than reading them: ``validate_parsed_serve_args`` (the checks ``vllm serve``
makes before loading anything) on each on/off flag, ``ParserManager.get_tool_parser`` for which flags
give a server a tool parser, and ``create_error_response`` for the HTTP body of the refusal.
``tests/sandbox/test_vllm_flags.py`` compares it with the venv's vLLM wherever ``.venv-vllm`` exists.

- ``check_startup``: a flag that requires another (``--enable-auto-tool-choice`` without
  ``--tool-call-parser``) or conflicts with one stops the server with vLLM's error (exit code 1);
  a parser name vLLM has not registered stops it with the error vLLM raises when it builds its parsers.
- ``tool_choice_auto_refusal``: what the server answers a chat request with ``tool_choice: "auto"``
  when it was started without both flags (vllm/renderers/online_renderer.py ``render_chat``): 400.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from capserve.core.vllm.versions import newest_version, snapshot_file


class VllmStartupError(Exception):
    """vLLM's startup error (one line, ``Type: message``); the server exits with code 1."""

    def __init__(self, message: str, flag: str) -> None:
        super().__init__(message)
        self.flag = flag  # the flag the rule is about


@cache
def rules(version: str | None = None) -> dict[str, Any]:
    """The rules snapshot of vLLM ``version`` (default: the newest the repository holds)."""
    data: dict[str, Any] = json.loads(snapshot_file(version or newest_version(), "serve_rules.json"))
    return data


def _set(values: Mapping[str, Any], dest: str) -> bool:
    return bool(values.get(dest))


def check_startup(values: Mapping[str, Any], version: str | None = None) -> None:
    """Raise ``VllmStartupError`` with vLLM's message when the parsed arguments break one of its rules."""
    snapshot = rules(version)
    for rule in snapshot["startup"]["rules"]:
        if not _set(values, rule["when"]):
            continue
        required = rule.get("requires_one_of")
        if required is not None and not any(_set(values, option["dest"]) for option in required):
            raise VllmStartupError(rule["error"], rule["flag"])
        conflict = rule.get("conflicts_with")
        if conflict is not None and _set(values, conflict["dest"]):
            raise VllmStartupError(rule["error"], rule["flag"])
    if values.get("tool_parser_plugin"):
        return  # a plugin registers parsers of its own: any name may be valid
    tool = values.get("tool_call_parser")
    # get_tool_parser looks the name up only when auto tool choice is on.
    if tool and _set(values, "enable_auto_tool_choice") and tool not in snapshot["tool_parsers"]:
        raise VllmStartupError(snapshot["unknown_tool_parser_error"].replace("{name}", str(tool)), "--tool-call-parser")
    reasoning = values.get("reasoning_parser")
    if reasoning and reasoning not in snapshot["reasoning_parsers"]:
        raise VllmStartupError(
            snapshot["unknown_reasoning_parser_error"].replace("{name}", str(reasoning)), "--reasoning-parser"
        )


def tool_choice_auto_refusal(values: Mapping[str, Any], version: str | None = None) -> dict[str, Any] | None:
    """``{"status": 400, "body": {...}}`` when a server with these arguments refuses ``tool_choice: "auto"``."""
    rule = rules(version)["chat_tool_choice_auto"]
    if all(_set(values, dest) for dest in rule["needs"]):
        return None
    return {"status": int(rule["status"]), "body": rule["body"]}
