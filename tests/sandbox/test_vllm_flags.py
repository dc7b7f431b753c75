"""The committed snapshots of `vllm serve`'s flags and cross-flag rules (capserve/core/vllm) are the installed
vLLM's, the snapshot parses as vLLM parses, and vLLM's own parser accepts every argument list capserve renders."""

from __future__ import annotations

from typing import Any

import pytest

from capserve.core.vllm.parser import VllmArgsError, parse_serve_args, serve_argv, snapshot
from capserve.core.vllm.rules import rules
from tests.vllm_answers import API_KEY, rendered_argument_lists, vllm_answers


@pytest.fixture(scope="module")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The installed vLLM's answers (tests/vllm_answers.py: one run of scripts/vllm_checks.py per test run): both
    snapshots as they would be written now and its verdict on each rendered argument list."""
    return vllm_answers(tmp_path_factory)


@pytest.mark.vllm
def test_the_snapshot_is_what_the_real_parser_says_now(real_vllm: dict[str, Any]) -> None:
    now = real_vllm["flags"]  # the snapshot of the installed version: a new version needs its own committed
    assert now == snapshot(now["vllm_version"]), (
        "vLLM's flags changed: run `.venv-vllm/bin/python scripts/snapshot_vllm_flags.py` and commit the snapshot"
    )


@pytest.mark.vllm
def test_the_rules_snapshot_is_what_vllms_own_checks_say_now(real_vllm: dict[str, Any]) -> None:
    now = real_vllm["rules"]
    assert now == rules(now["vllm_version"]), (
        "vLLM's cross-flag rules changed: run `.venv-vllm/bin/python scripts/snapshot_vllm_rules.py` and commit it"
    )


@pytest.mark.vllm
def test_the_real_vllm_parser_accepts_every_rendered_argument_list(real_vllm: dict[str, Any]) -> None:
    """vLLM 0.32's own parser and serve-argument checks, run on what the kubelet would exec; the leader gets its
    API key, also one that begins with "-"."""
    verdicts = real_vllm["verdicts"]
    assert [v["args"] for v in verdicts] == rendered_argument_lists()
    refused = [(v["args"], v["error"]) for v in verdicts if v["error"] is not None]
    assert not refused, f"vLLM refuses capserve's rendered arguments: {refused}"
    leaders = [v for v in verdicts if not v["headless"]]
    assert leaders and all(v["api_key"] in (API_KEY, [API_KEY]) for v in leaders), leaders


def test_arguments_parse_with_vllms_rewriting() -> None:
    parsed = parse_serve_args(
        [
            "--model",
            "/w/k3",
            "--max_model_len",
            "128k",
            "-tp",
            "8",
            "--enable-expert-parallel",
            "--compilation-config.mode",
            "3",
            "--served-model-name",
            "kimi-k3",
            "--api-key",
            "k",
        ]
    )
    assert parsed.model == "/w/k3" and parsed.served_model_names == ["kimi-k3"] and parsed.api_keys == ["k"]
    assert parsed.get("max_model_len") == 128_000 and parsed.get("tensor_parallel_size") == 8
    assert parsed.get("compilation_config") == {"mode": 3} and parsed.get("enable_expert_parallel") is True
    assert parsed.port == 8000 and not parsed.headless


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["/w", "--bogus", "1"], 2, "vllm: error: unrecognized arguments: --bogus 1"),
        (["/w", "--port", "eighty"], 2, "argument --port: invalid int value: 'eighty'"),
        (["/w", "--kv-cache-dtype", "fp9"], 2, "argument --kv-cache-dtype: invalid choice: 'fp9'"),
        (["/w", "--compilation-config", '{"nope": 1}'], 2, "nope"),
        (["/w", "--max-model-len", "1.5K"], 2, "Decimals are not allowed with binary suffixes"),
        (["--served-model-name", "x"], 1, "`model` should be provided as the first positional argument"),
        (["/w", "--enable-auto-tool-choice"], 1, "--enable-auto-tool-choice requires --tool-call-parser"),
        (
            ["/w", "--enable-per-request-metrics", "--disable-log-stats"],
            1,
            "ValueError: Error: --enable-per-request-metrics requires engine statistics logging",
        ),
        (["/w", "--reasoning-parser", "kimi_k9"], 1, "reasoning_parser_name='kimi_k9' has not been registered"),
        (["/w", "--nnodes", "2", "--node-rank", "2"], 1, "node_rank 2 must be in [0, 2)"),
        (["/w", "-tp", "3", "--nnodes", "2"], 1, "not divisible by nnodes 2"),
    ],
)
def test_refusals_match_vllms(argv: list[str], code: int, message: str) -> None:
    with pytest.raises(VllmArgsError) as refused:
        parse_serve_args(argv)
    assert refused.value.exit_code == code and message in "\n".join(refused.value.lines)


def test_an_unambiguous_abbreviation_is_its_flag_as_in_vllm() -> None:
    # vLLM 0.32 keeps argparse's allow_abbrev default (measured: `vllm serve /w --api-k x` sets api_key).
    assert parse_serve_args(["/w", "--api-k", "k", "--max-model", "4k"]).api_keys == ["k"]
    with pytest.raises(VllmArgsError) as refused:
        parse_serve_args(["/w", "--api=k"])
    assert refused.value.exit_code == 2 and refused.value.flag == "--api"
    assert "ambiguous option: --api=k could match --api-key, --api-server-count" in refused.value.lines[-1]


def test_the_serve_arguments_are_found_in_the_container_command() -> None:
    assert serve_argv(["vllm", "serve"], ["/w", "-tp", "8"]) == ["/w", "-tp", "8"]
    assert serve_argv([], ["--model", "/w"]) == ["--model", "/w"]  # the image's own entrypoint
    script = ["/bin/sh", "-c", "set -e\nexec vllm serve /w --node-rank ${RANK} --port $PORT"]
    assert serve_argv(script, [], {"RANK": "1", "PORT": "8000"}) == ["/w", "--node-rank", "1", "--port", "8000"]
    assert serve_argv(["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "/w"]) == ["--model", "/w"]
    assert serve_argv(["/bin/sh", "-c", "echo hello"], []) is None  # not a vLLM command
