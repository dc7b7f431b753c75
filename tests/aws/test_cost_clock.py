"""AWS's clock as the campaign reads it (the Date header), against the sandbox's AWS, whose clock can jump."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.clock import CLOCK

from capserve.tasks.cost.clock import aws_clock_offset

REGION = "us-east-2"


@pytest.fixture
def sandbox() -> Iterator[None]:
    CLOCK.reset()
    with moto_sandbox(REGION):
        yield
    CLOCK.reset()


def test_the_same_clock_reads_as_no_offset(sandbox: None) -> None:
    # The header has whole seconds; the request takes a moment: within 2 s of the host.
    assert abs(aws_clock_offset(REGION)) <= timedelta(seconds=2)


def test_a_clock_that_jumped_to_a_reservations_start_reads_as_the_jump(sandbox: None) -> None:
    CLOCK.advance(timedelta(hours=6, minutes=35))
    offset = aws_clock_offset(REGION)
    assert abs(offset - timedelta(hours=6, minutes=35)) <= timedelta(seconds=2)
