"""The evaluate_endpoint flow and the ``capserve eval`` command against the sandbox server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capserve_sandbox.openai_server import Faults, SandboxConfig, serve

from capserve.cli import main
from capserve.core.evaluation.spec import EvaluationSpec, LoadSpec
from capserve.flows.evaluate import evaluate_endpoint, public_url

SMALL_LOAD = LoadSpec(
    concurrency_levels=(1, 4),
    request_rates=(40.0,),
    open_loop_requests=12,
    prompt={"tokens": 16},  # type: ignore[arg-type]
    output={"tokens": 8},  # type: ignore[arg-type]
    warmup_requests=0,
)


def test_flow_runs_every_profile_and_reports_a_failed_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_KEY", "sk-test-secret-123")
    spec = EvaluationSpec(load=SMALL_LOAD, quality={"max_items": 12})  # type: ignore[arg-type]
    with serve(SandboxConfig(faults=Faults(malformed_tool_call_rate=1.0))) as url:
        result = evaluate_endpoint(url, "sandbox-model", spec, api_key_env="SANDBOX_KEY", out_dir=tmp_path)
    assert result.verdict == "fail"
    assert [g.name for g in result.gates if g.passed is False] == ["smoke_failed_checks"]
    assert result.quality is not None and result.quality.accuracy == 1.0
    assert result.load is not None and [p.name for p in result.load.points] == ["c1", "c4", "rate40"]
    assert all(p.metrics.failed == 0 for p in result.load.points)
    assert sorted(Path(p).name for p in result.plots) == ["latency-cdf.png", "throughput-vs-concurrency.png"]
    saved = (tmp_path / "evaluation.json").read_text()
    assert "sk-test-secret-123" not in saved and "sk-test-secret-123" not in json.dumps(result.report_section())


def test_missing_api_key_variable_is_a_clear_error(tmp_path: Path) -> None:
    from capserve.core.errors import PermanentError
    from capserve.tasks.evaluation.auth import read_auth

    with pytest.raises(PermanentError, match="CAPSERVE_NO_SUCH_VAR"):
        read_auth("CAPSERVE_NO_SUCH_VAR")


def test_cli_json_prints_the_report_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve() as url:
        code = main(
            [
                "eval",
                "--url",
                url,
                "--model",
                "sandbox-model",
                "--profile",
                "smoke",
                "--json",
                "--out-dir",
                str(tmp_path),
            ]
        )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass"
    assert [c["name"] for c in out["smoke"]] == ["health", "models", "chat_stream", "image", "tool_call"]
    assert out["quality"] is None and out["load"] is None


def test_cli_load_size_options_reach_the_spec(tmp_path: Path) -> None:
    from capserve.cli import build_parser
    from capserve.cli.eval import build_spec

    args = build_parser().parse_args(
        [
            "eval",
            "--url",
            "u",
            "--model",
            "m",
            "--concurrency",
            "2,16",
            "--rates",
            "",
            "--output-tokens",
            "32",
            "--range-ratio",
            "0.5",
            "--quality-max-items",
            "5",
        ]
    )
    spec = build_spec(args)
    assert spec.load.concurrency_levels == (2, 16) and spec.load.request_rates == ()
    assert spec.load.output.tokens == 32 and spec.load.output.range_ratio == 0.5 and spec.load.prompt.range_ratio == 0.5
    assert spec.quality.max_items == 5
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["eval", "--url", "u", "--model", "m", "--concurrency", "0"])
    assert refused.value.code == 2


def test_public_url_drops_credentials() -> None:
    assert public_url("http://user:pw@host:8000/v1?key=abc") == "http://host:8000/v1"


def test_flow_passes_a_thinking_model_whose_thinking_outlasts_the_smoke_tokens(tmp_path: Path) -> None:
    # No catalog entry given: the smoke stream's thinking is what makes quality leave room for it.
    spec = EvaluationSpec(quality={"max_items": 6, "max_tokens": 16})  # type: ignore[arg-type]
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)) as url:
        result = evaluate_endpoint(url, "sandbox-model", spec, profiles=("smoke", "quality"), out_dir=tmp_path)
    assert result.verdict == "pass", [g for g in result.gates if not g.passed]
    assert result.quality is not None and (result.quality.total, result.quality.correct) == (6, 6)
    stream = next(c for c in result.report_section()["smoke"] if c["name"] == "chat_stream")
    assert stream["ttft_ms"] is not None and stream["first_answer_ms"] is None and stream["thinking"] is True


def test_cli_unknown_catalog_model_is_refused_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "--url", "http://127.0.0.1:9", "--model", "m", "--catalog-model", "kimi-k9",
                 "--out-dir", str(tmp_path)])
    assert code == 2 and "--catalog-model: unknown model 'kimi-k9'" in capsys.readouterr().err
