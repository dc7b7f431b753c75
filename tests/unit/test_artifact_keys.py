"""Artifact keys: Prefect keeps the latest per key, so a campaign's keys hold the campaign."""

from __future__ import annotations

import re

from capserve.core.artifact_keys import artifact_key
from capserve.tasks.evaluation.publish import eval_key

PREFECT_KEY = re.compile(r"^[a-z0-9-]+$")  # lower-case letters, digits and dashes (docs/prefect.md §7)


def test_two_campaigns_evaluating_one_model_have_different_keys() -> None:
    assert eval_key("team-a", "kimi-k3", "summary") != eval_key("team-b", "kimi-k3", "summary")
    assert eval_key("team-a", "kimi-k3", "summary") == "team-a-eval-kimi-k3-summary"


def test_an_evaluation_outside_a_campaign_keeps_the_models_key() -> None:
    assert eval_key(None, "Kimi-K3", "gates") == "eval-kimi-k3-gates"


def test_a_repo_name_becomes_a_key_prefect_accepts() -> None:
    key = artifact_key("side-1", "weights-plan", "moonshotai/Kimi_K3.v2")
    assert key == "side-1-weights-plan-moonshotai-kimi-k3-v2" and PREFECT_KEY.match(key)
