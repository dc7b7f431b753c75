"""The rollout stage's flow: serve the plan with vLLM on the cluster, checked, and undone when it fails.

    (API-key Secret) ─► choose strategy ─► steps ─► record the last good configuration
                                              └─ on failure: the rollback's steps, or raise (→ teardown)

The strategy (``capserve.core.rollout.strategy``): *initial* when nothing serves, *blue-green* when
the reservation holds two copies, *recreate* when it holds one; *unchanged* when what serves already
runs this configuration (a re-run converges on it). Each step is a task; every failure is diagnosed
(``capserve.core.rollout.diagnosis``) and named in the error and the report. A failed rollout with a
last good configuration in the campaign record is rolled back to it and the stage ends *stopped*
(the cluster serves what it served before); one without raises, and the campaign tears down.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prefect import flow, get_run_logger

from capserve.campaign.rollout import RolloutInputs, RolloutRun
from capserve.campaign.run_names import stage_run_name
from capserve.core.cluster.result import ClusterResult
from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import PermanentError
from capserve.core.record import RolloutRecord
from capserve.core.rollout.config import RolloutConfig
from capserve.core.rollout.names import Color, serving_namespace, workload_name
from capserve.core.rollout.result import RolloutFailedError, RolloutResult
from capserve.core.rollout.strategy import RolloutDecision, Step, rollback_decision
from capserve.tasks.kube import api_client_for_eks
from capserve.tasks.rollout.access import key_in_environment, port_forward
from capserve.tasks.rollout.objects import ensure_api_key
from capserve.tasks.the_clock import clock

# The variable the evaluation reads the campaign's endpoint key from, only while it runs.
ENDPOINT_KEY_ENV = "CAPSERVE_ENDPOINT_API_KEY"


def _record_of(config: RolloutConfig, color: Color) -> RolloutRecord:
    return RolloutRecord(color=color, config=config, ready_at=clock().now())


@flow(name="rollout", flow_run_name=stage_run_name("rollout"))
def roll_out(inputs: RolloutInputs) -> tuple[RolloutResult, RolloutRecord]:
    """Roll the plan out (or converge on it); on failure roll back to the last good configuration.

    Returns the report section and the record of what serves now (the campaign record keeps it as
    the last good configuration). Raises ``RolloutFailedError`` when nothing good can serve.
    """
    cluster = inputs.cluster
    run = RolloutRun(
        inputs,
        api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, cluster.region, settings=inputs.kube),
        serving_namespace(inputs.spec.campaign_id),
    )
    ensure_api_key(run.api, run.namespace, inputs.spec.campaign_id)
    config = inputs.config()
    decision, current = run.decide(config)
    get_run_logger().info("rollout: %s (%s)", decision.strategy, decision.reason)
    try:
        outcome = run.attempt(config, decision)
    except RolloutFailedError as failed:
        undo = rollback_decision(decision, current)
        if undo is None or current is None or decision.strategy == "unchanged":
            raise  # nothing good to go back to: the campaign tears down
        get_run_logger().warning("rollout of %s failed: %s; rolling back", decision.new_name, failed)
        outcome = run.attempt(current.config, undo)
        return run.result(outcome, undo, rolled_back=True), _record_of(current.config, current.color)
    return run.result(outcome, decision, rolled_back=False), _record_of(config, decision.new_color)


@flow(name="rollback", flow_run_name=stage_run_name("rollback"))
def roll_back(inputs: RolloutInputs, failed_color: Color, why: str) -> tuple[RolloutResult, RolloutRecord]:
    """Bring ``inputs.last_good`` back after a configuration that served under ``failed_color`` was found bad
    (a redeploy whose evaluation failed). Its rollout had finished, so the old colour is gone whatever the
    strategy (blue/green deletes it after the switch): undo it as a recreate does (delete the failed colour,
    apply the last good configuration under its own colour, wait, switch the Services back).
    """
    good = inputs.last_good
    if good is None:
        raise PermanentError(
            f"campaign {inputs.spec.campaign_id}: no last good configuration recorded to roll back to ({why})"
        )
    cluster = inputs.cluster
    run = RolloutRun(
        inputs,
        api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, cluster.region, settings=inputs.kube),
        serving_namespace(inputs.spec.campaign_id),
    )
    served = RolloutDecision(
        strategy="recreate", new_color=failed_color, steps=(Step.APPLY_NEW,), reason=f"served, then {why}"[:500]
    )
    undo = rollback_decision(served, good)
    assert undo is not None  # noqa: S101 - a last good configuration always has an undo
    get_run_logger().warning("rolling back to revision %s: %s", good.config.revision, why)
    outcome = run.attempt(good.config, undo)
    return run.result(outcome, undo, rolled_back=True), _record_of(good.config, good.color)


@contextmanager
def served_endpoint(
    cluster: ClusterResult, rolled: RolloutResult, campaign_id: str, port: int, kube: KubeSettings
) -> Iterator[tuple[str, str]]:
    """A local URL for the serving leader (port-forward) and the name of the environment variable that holds
    the campaign's API key meanwhile: the key comes from the cluster's Secret, never from a flow parameter."""
    api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, cluster.region, settings=kube)
    key = ensure_api_key(api, rolled.namespace, campaign_id)
    with (
        port_forward(api, rolled.namespace, f"{rolled.name}-0", port, kube) as url,
        key_in_environment(ENDPOINT_KEY_ENV, key) as key_env,
    ):
        yield url, key_env


__all__ = ["RolloutInputs", "roll_back", "roll_out", "served_endpoint", "workload_name"]
