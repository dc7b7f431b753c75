"""One sandbox AWS (moto with capserve's extensions, us-east-2) per test module of tests/aws."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from capserve_sandbox.aws import moto_sandbox


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    with moto_sandbox("us-east-2"):
        yield
