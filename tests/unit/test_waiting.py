"""The wait helper and deadlines, on a fake clock: what is waited, for how long, and what a timeout says."""

from __future__ import annotations

import pytest

from capserve.core.deadline import Deadline, StepBudget
from capserve.core.errors import DeadlineError, PermanentError, WaitTimeoutError
from capserve.tasks.waiting import wait_until


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def test_waits_with_growing_pauses_until_done() -> None:
    fake = FakeTime()
    answers = iter(["pending"] * 5 + ["active"])
    value = wait_until(
        lambda: next(answers), done=lambda v: v == "active", describe=str, what="reservation cr-1",
        timeout_s=600, initial_s=10, max_s=40, sleep=fake.sleep, clock=fake.clock,
    )
    assert value == "active"
    assert fake.sleeps == [10, 20, 40, 40, 40]


def test_a_timeout_says_what_was_still_missing_and_never_oversleeps() -> None:
    fake = FakeTime()
    with pytest.raises(WaitTimeoutError) as raised:
        wait_until(
            lambda: 3, done=lambda v: v == 0, describe=lambda v: f"{v} nodes still NotReady", what="GPU nodes",
            timeout_s=25, initial_s=10, max_s=10, sleep=fake.sleep, clock=fake.clock,
        )
    assert str(raised.value) == "GPU nodes not ready after 25 s: 3 nodes still NotReady"
    assert fake.now - 1000.0 == 25 and fake.sleeps == [10, 10, 5]
    assert isinstance(raised.value, PermanentError)  # never retried by the task decorators


def test_a_hint_shortens_one_pause_and_jitter_only_shortens() -> None:
    fake = FakeTime()
    answers = iter([5, 0])
    wait_until(
        lambda: next(answers), done=lambda v: v == 0, describe=str, what="x", timeout_s=100,
        initial_s=30, next_wait=lambda v: float(v), sleep=fake.sleep, clock=fake.clock,
    )
    assert fake.sleeps == [5]

    fake = FakeTime()
    answers = iter([1, 1, 1, 0])
    wait_until(
        lambda: next(answers), done=lambda v: v == 0, describe=str, what="x", timeout_s=100,
        initial_s=10, jitter=0.5, sleep=fake.sleep, clock=fake.clock,
    )
    assert len(fake.sleeps) == 3 and all(5 <= s <= 10 for s in fake.sleeps)


def test_check_may_stop_the_wait_early() -> None:
    def check() -> str:
        raise PermanentError("reservation cr-1 is payment-failed")

    with pytest.raises(PermanentError, match="payment-failed"):
        wait_until(check, done=bool, describe=str, what="x", timeout_s=10, initial_s=1)


def test_deadline_and_step_budget() -> None:
    fake = FakeTime()
    deadline = Deadline(100, clock=fake.clock)
    budget = StepBudget(deadline, lambda step: f"stopped at {step}")
    assert budget.cap(300, "network") == 100
    fake.now += 60
    assert deadline.remaining() == 40 and budget.cap(30, "cluster") == 30
    with pytest.raises(PermanentError, match="boom"), budget.step("cluster"):
        raise PermanentError("boom")  # inside the budget: the step's own error
    with pytest.raises(DeadlineError, match=r"stopped at nodes \(late\)"), budget.step("nodes"):  # noqa: PT012 - time passes in the step
        fake.now += 50
        raise PermanentError("late")  # failed once the budget was spent: the budget is why it stopped
    assert deadline.expired and deadline.cap(10) == 0
    with pytest.raises(DeadlineError, match="stopped at add-ons"):
        budget.cap(10, "add-ons")


def test_a_step_deadline_within_a_deadline_ends_at_the_sooner_of_the_two() -> None:
    fake = FakeTime()
    overall = Deadline(100, clock=fake.clock)
    assert overall.within(30).end == fake.now + 30  # the step's own bound comes first
    fake.now += 90
    step = overall.within(30)
    assert step.end == overall.end and step.seconds == 10  # what is left of the overall deadline comes first
    fake.now += 10
    assert step.expired and overall.within(30).seconds == 0
