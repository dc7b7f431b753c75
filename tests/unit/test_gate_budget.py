"""The gate before traffic: smoke and quality within a budget in minutes, refused when they cannot fit it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capserve.core.errors import SpecError
from capserve.core.evaluation.spec import EvaluationSpec, gate_floor_s
from capserve.core.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


def test_the_default_gate_fits_its_ten_minutes() -> None:
    spec = EvaluationSpec()
    assert spec.gate_budget_minutes == 10
    # Five smoke checks at 60 s each and one golden item at 300 s: exactly the budget at worst.
    assert gate_floor_s(spec) == 5 * 60 + 300 <= 10 * 60


def test_a_budget_the_gate_cannot_keep_is_refused_naming_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.setdefault("evaluation", {})["gate_budget_minutes"] = 5
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "evaluation.gate_budget_minutes 5" in message and "10 min at worst" in message
    assert "raise the budget or lower those timeouts" in message
    # Lower timeouts make the same budget fit.
    data["evaluation"]["smoke"] = {"check_timeout_s": 20.0}
    data["evaluation"]["quality"] = {"request_timeout_s": 120.0}
    path.write_text(yaml.safe_dump(data))
    assert load_spec(path).evaluation.gate_budget_minutes == 5


def test_smoke_and_quality_run_within_the_gate_budget_and_load_within_the_deadline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    import capserve.flows.evaluate as evaluate

    given: dict[str, float] = {}

    def smoke(url: str, model: str, spec: EvaluationSpec, key: object, auth: object, left: float) -> object:
        given["smoke"] = left
        return SimpleNamespace(unreachable=False, saw_thinking=False)

    def quality(url: str, model: str, spec: EvaluationSpec, key: object, auth: object, left: float,
                thinks: bool, thinking: object) -> object:  # fmt: skip
        given["quality"] = left
        return SimpleNamespace()

    def load(url: str, model: str, load: object, gates: object, out: Path, key: object, auth: object,
             left: float) -> object:  # fmt: skip
        given["load"] = left
        return SimpleNamespace()

    monkeypatch.setattr(evaluate, "run_smoke", smoke)
    monkeypatch.setattr(evaluate, "run_quality", quality)
    monkeypatch.setattr(evaluate, "run_load", load)
    spec = EvaluationSpec(timeout_s=3600.0, gate_budget_minutes=10)
    *_, not_run = evaluate._run_profiles("http://e", "m", spec, evaluate.PROFILES, None, None, tmp_path)
    assert not_run == []
    # The gate (smoke, quality) gets its 10 minutes; the load profile what is left of the hour.
    assert given["smoke"] <= 600 and given["quality"] <= 600
    assert 600 < given["load"] <= 3600
