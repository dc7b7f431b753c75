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
