"""``capserve plan`` through the real dispatcher, and what it imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from capserve.cli import main

HEAVY = ("prefect", "boto3", "botocore", "kubernetes", "huggingface_hub", "httpx", "aiohttp")


def test_json_is_one_object_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["nodes"], plan["tensor_parallel"], plan["fits"]) == (1, 8, True)
    assert plan["instance_type"] == "p6-b300.48xlarge"
    assert plan["smallest_unit_gpus"] == 8
    assert plan["reserve_bytes_per_gpu"] == sum(plan["reserve_parts_per_gpu"].values())
    assert set(plan["reserve_parts_per_gpu"]) >= {"cuda_context", "activations", "cuda_graphs", "nccl"}
    alternative = plan["alternatives"][0]
    assert set(alternative) >= {"layout", "nodes", "fits", "weight_bytes_per_gpu", "max_tokens_in_kv", "reason"}


def test_text_shows_the_layout_and_the_alternatives_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p6-b200.48xlarge", "--context", "131072"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "TP8xPP2" in out and "2 x p6-b200.48xlarge" in out and "131,072" in out
    assert "alternatives (ranked, kv_headroom)" in out and "TP8xDP2+EP16" in out
    assert "reserve per GPU" in out and "cuda graphs" in out


def test_objective_flag_changes_the_choice(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p6-b200.48xlarge", "--objective", "throughput", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["objective"] == "throughput"
    assert plan["parallel"]["enable_expert_parallel"] and plan["expert_parallel"] == 16


def test_refusal_exits_1_and_says_what_would_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p5.48xlarge", "--max-nodes", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert json.loads(out)["fits"] is False
    assert "short by" in err and "4 x p5.48xlarge" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "kimi-k9", "--instance-type", "p5.48xlarge"], "known: deepseek-v3"),
        (["plan", "kimi-k3", "--instance-type", "p9.huge"], "p6-b300.48xlarge"),
        (["plan", "kimi-k2", "--instance-type", "p5en.48xlarge", "--context", "262144"],
         "context 262,144 exceeds kimi-k2's maximum of 131,072 tokens"),
        (["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--concurrency", "0"],
         "concurrency 0 must be at least 1"),
        (["plan", "kimi-k3", "--instance-type", "p5.4xlarge"],
         "p5.4xlarge's 1 x H100 cannot hold even kimi-k3's dense (non-expert) weights"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_clear_message(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_kv_cache_dtype_bf16_doubles_kv_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--kv-cache-dtype", "bf16", "--json"])
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 27_648


@pytest.mark.slow
def test_plan_and_help_import_no_orchestration_and_no_sdk() -> None:
    # A fresh interpreter: importing the CLI and running `plan` (and `--help`) must leave Prefect and
    # every cloud SDK unloaded; that is what keeps `capserve plan` well under half a second.
    script = textwrap.dedent(
        f"""
        import contextlib, io, sys
        from capserve.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge"]) == 0
            assert main(["plan", "kimi-k3", "--instance-type", "p5en.48xlarge", "--json"]) == 0
            try:
                main(["--help"])
            except SystemExit:
                pass
        print(",".join(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
