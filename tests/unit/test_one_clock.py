"""One clock: the product asks the port (``capserve.core.clock``) through one seam, and knows nothing of a simulation.

The seam (``capserve.tasks.the_clock``) is the one module of ``capserve/`` that knows another clock than the host's
may be plugged in; every other module asks ``clock()``, in the port's terms (due instants, work, waits), never in
a simulation's. A simulated block's mapping, its HTTP client and its server are the sandbox's (``capserve_sandbox``);
one module, ``capserve/cli/sandbox.py`` (the sandbox's start-up, for ``capserve sandbox`` and ``capserve up
--sandbox``: it plugs the clock in, says so and takes the options that name the simulated window), is the one place
of ``capserve/`` that speaks of simulated time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capserve.core.clock import HOST
from capserve.core.errors import SpecError
from capserve.tasks import the_clock

PACKAGE = Path(__file__).resolve().parents[2] / "capserve"
SEAM = PACKAGE / "tasks" / "the_clock.py"

# What only the seam, or the sandbox, may name: the plugged clock's variable, the simulated window, its client.
SIMULATION = re.compile(r"CAPSERVE_CLOCK|CLOCK_ENV|CLOCK_URL|WarpedWindow|\bwarp\b|capserve_sandbox\.clock")


def test_no_module_of_the_product_but_the_seam_knows_a_simulated_clock() -> None:
    knowing = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if path != SEAM and SIMULATION.search(path.read_text(encoding="utf-8"))
    )
    assert knowing == []


# What no module of the product but the sandbox's start-up may name: a simulated time, a clock's pace or rates.
SIMULATED_TIME = re.compile(
    r"simulat\w*|\bPace\b|\bpace\(|\b(?:fast|near|busy|working)_rate\b|slow_spans", re.IGNORECASE
)
START_UP = PACKAGE / "cli" / "sandbox.py"  # starts the sandbox, plugs its clock in and says so on the console
IAM = {PACKAGE / "core" / "permissions.py", PACKAGE / "tasks" / "permissions.py"}  # IAM's policy simulator's client
NOT_THE_CLOCK = re.compile(r"IAM|iam:|permission|simulated vLLM|sandbox's simulation|\"simulated_rate\"")
"""A line naming IAM's policy simulation, the sandbox's stand-in vLLM server (named from its log), or the key an
older record's ledger inputs held (read and dropped) is not about the clock."""


def test_no_module_of_the_product_but_the_sandbox_start_up_speaks_of_simulated_time() -> None:
    speaking = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        if path != START_UP and path not in IAM
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SIMULATED_TIME.search(line) and not NOT_THE_CLOCK.search(line)
    )
    assert speaking == []


def test_the_old_clock_modules_are_gone() -> None:
    assert not (PACKAGE / "tasks" / "clock.py").exists()
    assert not (PACKAGE / "core" / "warp.py").exists()


def test_without_a_plugged_clock_the_product_asks_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(the_clock.CLOCK_ENV, raising=False)
    clock = the_clock.clock()
    assert clock is HOST
    before = datetime.now(UTC)
    assert before <= clock.now() <= datetime.now(UTC)
    later = before + timedelta(days=1)
    assert clock.wall_time_to_schedule(later) == later  # Prefect fires the run at its time


def test_a_clock_named_by_the_environment_is_the_one_every_module_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(the_clock.CLOCK_ENV, "capserve_sandbox.clock_client:HttpClock http://127.0.0.1:9")
    clock = the_clock.clock()
    assert type(clock).__name__ == "HttpClock"
    assert clock is the_clock.clock()  # one per process
    assert the_clock.clock_environment({the_clock.CLOCK_ENV: "x:y z", "OTHER": "1"}) == {the_clock.CLOCK_ENV: "x:y z"}


def test_a_clock_variable_naming_nothing_is_a_spec_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(the_clock.CLOCK_ENV, "capserve_nowhere:Clock http://127.0.0.1:9")
    with pytest.raises(SpecError, match="CAPSERVE_CLOCK="):
        the_clock.clock()
