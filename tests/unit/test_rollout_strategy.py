"""Recreate vs blue/green, colours, and rollback to the last good configuration: decisions as data."""

from __future__ import annotations

from rollout_fixtures import config_for, k3_plan, spec

from capserve.core.rollout.config import RolloutConfig
from capserve.core.rollout.strategy import Serving, Step, choose_strategy, rollback_decision


def test_first_rollout_is_initial_and_blue() -> None:
    decision = choose_strategy(None, config_for(k3_plan()), nodes_available=1)
    assert (decision.strategy, decision.new_name, decision.old_name) == ("initial", "vllm-blue", None)
    assert decision.steps[:2] == (Step.APPLY_NEW, Step.WAIT_READY) and Step.DELETE_OLD not in decision.steps


def test_one_b300_cannot_hold_two_k3s_so_it_recreates() -> None:
    old = Serving(color="blue", config=config_for(k3_plan()))
    new = config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0"))
    decision = choose_strategy(old, new, nodes_available=1)
    assert decision.strategy == "recreate" and "need 2 GPU nodes but the reservation has 1" in decision.reason
    assert decision.steps[0] is Step.DELETE_OLD and decision.steps.index(Step.APPLY_NEW) == 1
    assert (decision.new_name, decision.old_name) == ("vllm-green", "vllm-blue")


def test_two_b300_hold_two_k3s_so_blue_green_switches_after_evaluation() -> None:
    old = Serving(color="green", config=config_for(k3_plan()))
    decision = choose_strategy(old, config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0")), nodes_available=2)
    assert decision.strategy == "blue-green" and decision.new_name == "vllm-blue"
    steps = decision.steps
    assert steps.index(Step.EVALUATE) < steps.index(Step.SWITCH_SERVICE) < steps.index(Step.DELETE_OLD)
    # A two-node K3 (two p6-b200) needs four nodes for two copies.
    two_node = Serving(color="blue", config=config_for(k3_plan("p6-b200.48xlarge")))
    changed = config_for(k3_plan("p6-b200.48xlarge"), spec(image="vllm/vllm-openai:v0.33.0"))
    assert choose_strategy(two_node, changed, nodes_available=3).strategy == "recreate"
    assert choose_strategy(two_node, changed, nodes_available=4).strategy == "blue-green"


def test_what_already_serves_the_configuration_is_converged_on_under_its_own_colour() -> None:
    serving = Serving(color="green", config=config_for(k3_plan()))
    decision = choose_strategy(serving, config_for(k3_plan()), nodes_available=2)
    assert (decision.strategy, decision.new_name, decision.old_name) == ("unchanged", "vllm-green", None)
    assert Step.DELETE_OLD not in decision.steps and decision.steps[-1] is Step.SAVE_CACHE


def test_a_failed_blue_green_keeps_the_old_colour_serving() -> None:
    good = Serving(color="blue", config=config_for(k3_plan()))
    failed = choose_strategy(good, config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0")), nodes_available=2)
    rollback = rollback_decision(failed, good)
    assert rollback is not None and rollback.rollback
    assert (rollback.new_name, rollback.old_name, rollback.steps) == (
        "vllm-blue", "vllm-green", (Step.DELETE_OLD, Step.SWITCH_SERVICE)
    )


def test_a_failed_recreate_brings_the_last_good_configuration_back() -> None:
    good_config: RolloutConfig = config_for(k3_plan())
    good = Serving(color="blue", config=good_config)
    failed = choose_strategy(good, config_for(k3_plan(), spec(image="vllm/vllm-openai:broken")), nodes_available=1)
    rollback = rollback_decision(failed, good)
    assert rollback is not None and rollback.strategy == "recreate" and rollback.rollback
    assert rollback.old_name == "vllm-green" and rollback.new_name == "vllm-blue"
    assert rollback.steps == (Step.DELETE_OLD, Step.APPLY_NEW, Step.WAIT_READY, Step.SWITCH_SERVICE)
    assert good_config.revision in rollback.reason
    # The last good configuration survives a round trip through JSON (the campaign record keeps it).
    assert RolloutConfig.model_validate_json(good_config.model_dump_json()) == good_config
    # Nothing was ever good: no rollback (the campaign tears down instead).
    assert rollback_decision(choose_strategy(None, good_config, nodes_available=1), None) is None


def test_every_strategy_saves_the_compile_cache_only_after_the_services_switched() -> None:
    old = Serving(color="green", config=config_for(k3_plan()))
    new = config_for(k3_plan(), spec(image="vllm/vllm-openai:v0.33.0"))
    decisions = [
        choose_strategy(None, new, nodes_available=1),
        choose_strategy(old, new, nodes_available=1),
        choose_strategy(old, new, nodes_available=2),
    ]
    assert [d.strategy for d in decisions] == ["initial", "recreate", "blue-green"]
    assert all(d.steps[-1] is Step.SAVE_CACHE for d in decisions)
