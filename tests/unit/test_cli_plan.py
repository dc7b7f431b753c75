"""``capserve plan`` through the real dispatcher."""

from __future__ import annotations

import json

import pytest

from capserve.cli import main


def test_json_is_one_object_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["nodes"], plan["tensor_parallel"], plan["fits"]) == (1, 8, True)
    assert plan["instance_type"] == "p6-b300.48xlarge"


def test_table_names_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p6-b200.48xlarge", "--context", "131072"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "TP8xPP2" in out and "2 x p6-b200.48xlarge" in out and "131,072" in out


def test_refusal_exits_1_and_says_what_would_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "kimi-k3", "--instance-type", "p5.48xlarge", "--max-nodes", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert json.loads(out)["fits"] is False
    assert "short by" in err and "4 x p5.48xlarge" in err


@pytest.mark.parametrize(
    ("args", "known"),
    [
        (["plan", "kimi-k9", "--instance-type", "p5.48xlarge"], "kimi-k3"),
        (["plan", "kimi-k3", "--instance-type", "p9.huge"], "p6-b300.48xlarge"),
    ],
)
def test_unknown_names_exit_2_with_the_known_ones(
    capsys: pytest.CaptureFixture[str], args: list[str], known: str
) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and known in err


def test_kv_cache_dtype_bf16_doubles_kv_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--kv-cache-dtype", "bf16", "--json"])
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 27_648
