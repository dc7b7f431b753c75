"""The retry policy: every task carries one, retries only RetryableError, and a purchase is never retried."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from prefect import Task, flow

import capserve.tasks
from capserve.core.errors import PermanentError, RetryableError, WaitTimeoutError
from capserve.core.settings import RetryPolicy, RetrySettings
from capserve.tasks.capacity.purchase import purchase
from capserve.tasks.resilience import (
    NO_RETRIES,
    CallKind,
    kind_of,
    policy_of,
    resilient_task,
    retry_only_retryable,
    single_shot_task,
    with_policy,
)


def every_task() -> dict[str, Task[..., object]]:
    """Every Prefect task defined in capserve.tasks, by module-qualified name."""
    found: dict[str, Task[..., object]] = {}
    for info in pkgutil.walk_packages(capserve.tasks.__path__, prefix="capserve.tasks."):
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if isinstance(value, Task) and value.fn.__module__ == info.name:
                found[f"{info.name}.{attr}"] = value
    return found


def test_there_are_tasks_to_check() -> None:
    assert len(every_task()) > 40


@pytest.mark.parametrize("name", sorted(every_task()))
def test_every_task_names_its_kind_of_call_and_carries_its_policy(name: str) -> None:
    made = every_task()[name]
    kind = kind_of(made)
    assert kind is not None, f"{name} was not made by capserve.tasks.resilience"
    assert not made.tags, f"{name}: a tagged task asks the server for a tag concurrency slot on every run"
    assert made.retries <= policy_of(kind, RetrySettings()).retries or kind is CallKind.SINGLE_SHOT
    if made.retries:
        assert made.retry_condition_fn is retry_only_retryable


def test_outside_calls_do_retry() -> None:
    tasks = every_task()
    for name in ("capacity.search.search_offers", "weights.hub.resolve_revision", "weights.s3.publish_file",
                 "kube.apply_addons", "cluster.eks.converge_cluster", "record_store.load_record"):
        assert tasks[f"capserve.tasks.{name}"].retries >= 1, name


def test_waits_are_not_retried() -> None:
    # A retried wait would start its deadline afresh: a wait meets a dropped watch inside its one deadline instead
    # (docs/design.md §6; tests/k8s/test_kube_tasks.py drops one twice).
    tasks = every_task()
    for name in ("kube.wait_gpu_nodes_ready", "kube.wait_addons_ready", "kube.prove_lws_webhooks",
                 "rollout.wait.wait_rollout_ready", "capacity.reservations.wait_until_usable"):
        assert tasks[f"capserve.tasks.{name}"].retries == 0, name


def test_a_purchase_is_single_shot() -> None:
    assert purchase.retries == 0
    assert kind_of(purchase) is CallKind.SINGLE_SHOT
    assert kind_of(with_policy(purchase, RetryPolicy(retries=0))) is CallKind.SINGLE_SHOT
    with pytest.raises(ValueError, match="never be retried"):
        with_policy(purchase, RetryPolicy(retries=1))
    with pytest.raises(ValueError, match="never be retried"):
        resilient_task(CallKind.SINGLE_SHOT, "buy", policy=RetryPolicy(retries=2))
    with pytest.raises(ValueError, match="say why"):
        single_shot_task("buy", why=" ")


def test_delays_grow_and_are_capped() -> None:
    assert RetryPolicy(retries=4, first_delay_s=1, growth=4, max_delay_s=10).delays() == [1, 4, 10, 10]
    assert NO_RETRIES.delays() == []


FAST = RetryPolicy(retries=2, first_delay_s=0, max_delay_s=0, jitter=0)


def attempts_until_done(error: BaseException) -> int:
    calls: list[int] = []

    @resilient_task(CallKind.AWS, "flaky", policy=FAST)
    def flaky() -> str:
        calls.append(1)
        raise error

    @flow
    def run() -> None:
        flaky()

    with pytest.raises(type(error)):
        run()
    return len(calls)


def test_a_retryable_error_is_retried_as_often_as_the_policy_says() -> None:
    assert attempts_until_done(RetryableError("throttled")) == 1 + FAST.retries


@pytest.mark.parametrize("error", [PermanentError("bad input"), WaitTimeoutError("waited"), KeyError("bug")])
def test_anything_else_is_never_retried(error: BaseException) -> None:
    assert attempts_until_done(error) == 1


def test_a_task_that_recovers_returns_its_value() -> None:
    calls: list[int] = []

    @resilient_task(CallKind.HUB, "recovers", policy=FAST)
    def recovers() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise RetryableError("503")
        return "ok"

    @flow
    def run() -> str:
        return recovers()

    assert run() == "ok" and len(calls) == 2
