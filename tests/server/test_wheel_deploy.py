"""An operator's install: capserve's wheel in a virtualenv outside the checkout, ``capserve deploy`` on a Prefect
server, a worker of that install, then ``capserve up SPEC --sandbox`` from a folder that is no checkout.

The wheel is built from a copy of the sources (``pip wheel --no-deps``; the build leaves nothing in the checkout) and
installed with ``--no-deps`` into a fresh virtualenv whose site-packages sees this test's virtualenv's through a
``.pth`` line, so nothing is downloaded again: a plain path line in a ``.pth`` adds the folder to ``sys.path`` without
running that folder's own ``.pth`` files (Python's ``site`` module documentation), so the checkout's editable install
of capserve (an import hook installed by a ``.pth`` there) is not seen, and ``capserve`` is the wheel's.

The campaign plays the quickest way that is still the deployment path: the sandbox without a simulated window (the
sandbox's AWS starts the block at once; a simulated block is the embedded server's, ``test_up_on_a_server.py``) and
``--teardown-when-done``, so the campaign run buys, serves, evaluates and tears down in one deployment run, which the
worker of the wheel's install runs from the module-path entrypoints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from capserve.runtime.prefect_server import WORKER_SETTINGS, Child, LocalServer, start_server
from capserve.tasks.scheduling import WALL_CLOCK_WATCHES, pause_wall_clock_watches

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"


@dataclass(frozen=True)
class Install:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def capserve(self) -> Path:
        return self.venv / "bin" / "capserve"


def build_wheel(into: Path, project: Path = ROOT, package: str = "capserve") -> Path:
    """``pip wheel --no-deps`` of a copy of a distribution's sources (capserve's, or the stand-ins' in sandbox/): a
    build in the checkout would leave build/ and egg-info."""
    source = into / "source"
    shutil.copytree(project / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        if (project / name).exists():
            shutil.copy(project / name, source / name)
    dist = into / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist),
                    f"{source}/"], check=True, cwd=into, timeout=600)
    (wheel,) = dist.glob(f"{package}-*.whl")
    return wheel


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would point Python or Prefect at the checkout or the test's server."""
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "PREFECT_API_URL", "PREFECT_HOME", "VIRTUAL_ENV"}}
    return {**env, **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def sandbox_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("sandbox-wheel"), ROOT / "sandbox", "capserve_sandbox")


@pytest.fixture(scope="module")
def install(wheel: Path, sandbox_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Install:
    venv = tmp_path_factory.mktemp("operator") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True, env=clean_env()).stdout.strip()
    # The dependencies (and pip) come from this test's virtualenv, as a path line: its .pth files (the editable
    # capserve's import hook among them) are not run.
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # The product, and the stand-ins `capserve up --sandbox` finds through their entry points.
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel),
                    str(sandbox_wheel)], check=True, env=clean_env(), timeout=300)
    return Install(wheel=wheel, venv=venv)


@pytest.mark.slow
def test_the_wheel_carries_the_deployments_and_the_command(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "capserve/deployments/prefect.yaml" in names
    assert "capserve/core/vllm/data/0.32.0/serve_flags.json" in names  # preflight parses vLLM's arguments with it
    assert {"capserve/examples/sandbox.yaml", "capserve/examples/aws.yaml"} <= names  # what `capserve init` writes
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "capserve = capserve.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    shipped = yaml.safe_load(zipfile.ZipFile(wheel).read("capserve/deployments/prefect.yaml"))
    assert {d["name"] for d in shipped["deployments"]} >= {"campaign", "serve", "drain", "scheduled-teardown"}
    assert all(f"{d['entrypoint'].rpartition('.')[0].replace('.', '/')}.py" in names for d in shipped["deployments"])
    # A production install carries no stand-in: they are the capserve-sandbox distribution's.
    assert sorted({name.split("/")[0] for name in names if not name.startswith("capserve-")}) == ["capserve"]
    assert not any(name.startswith(("capserve/sandbox/", "capserve_sandbox/")) for name in names)


@pytest.mark.slow
def test_the_stand_ins_wheel_holds_the_sandbox_and_registers_it_with_the_cli(sandbox_wheel: Path) -> None:
    names = set(zipfile.ZipFile(sandbox_wheel).namelist())
    assert {"capserve_sandbox/environment.py", "capserve_sandbox/kube/kubelet/runtimes.py"} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(sandbox_wheel).read(entry_points).decode()
    assert "[capserve.sandbox]" in text and "environment = capserve_sandbox.environment" in text


@dataclass
class Served:
    server: LocalServer
    worker: Child
    env: dict[str, str]  # what the operator's commands run with: PREFECT_API_URL and no checkout on any path


@pytest.fixture(scope="module")
def served(install: Install, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    logs = tmp_path_factory.mktemp("prefect")
    server = start_server(logs / "home")
    try:
        env = clean_env(**server.env)
        deployed = subprocess.run([str(install.capserve), "deploy"], env=env, cwd=logs, capture_output=True,
                                  text=True, timeout=300)
        assert deployed.returncode == 0, deployed.stderr
        assert "deployment campaign/campaign" in deployed.stdout
        # A worker of the operator's install: its flow processes run the wheel's interpreter and capserve.
        log = (logs / "worker.log").open("ab")
        process = subprocess.Popen(
            [str(install.python), "-m", "prefect", "worker", "start", "--pool", "capserve", "--type", "process"],
            env={**env, **WORKER_SETTINGS}, cwd=logs, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        worker = Child(name="prefect worker", process=process, log=logs / "worker.log")
        try:
            yield Served(server=server, worker=worker, env=env)
        finally:
            worker.stop()
    finally:
        server.child.stop()


@pytest.mark.server
@pytest.mark.slow
def test_deploy_then_up_from_the_wheel_plays_a_campaign_on_the_server(
    install: Install, served: Served, tmp_path: Path
) -> None:
    where = tmp_path / "operator"  # no checkout: no pyproject.toml, no deployments folder, no capserve sources
    where.mkdir()
    imported = subprocess.run([str(install.python), "-c", "import capserve; print(capserve.__file__)"],
                              env=served.env, cwd=where, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(imported).is_relative_to(install.venv), imported

    # Registering again changes nothing: the same twelve deployments, each schedule once.
    again = subprocess.run([str(install.capserve), "deploy"], env=served.env, cwd=where, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    listed = _deployments(install, served)
    assert len(listed) == 12 and len(set(listed)) == 12, listed
    assert listed["campaign/campaign"] == ("capserve.flows.campaign.campaign", 0)
    assert listed["reaper/reaper"][1] == 1 and listed["hub-watcher/hub-watcher"][1] == 1
    pause_wall_clock_watches(WALL_CLOCK_WATCHES, api_url=served.server.url)  # the campaign's runs only

    data = yaml.safe_load(EXAMPLE.read_text())
    # The client's lag does not invalidate the run on a machine shared by other processes (as test_up_on_a_server).
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2, "max_loop_lag_p99_ms": 10_000.0}
    (where / "spec.yaml").write_text(yaml.safe_dump(data))
    started = time.monotonic()
    up = subprocess.run(
        [str(install.capserve), "up", "spec.yaml", "--sandbox", "--yes", "--teardown-when-done", "--out", "out"],
        env=served.env, cwd=where, capture_output=True, text=True, timeout=900,
    )
    took = time.monotonic() - started
    report_path = where / "out" / "report.json"
    assert report_path.exists(), (up.returncode, up.stderr[-4000:])
    report = json.loads(report_path.read_text())
    # --teardown-when-done tears the block down as soon as the gate passed: on the played block's clock the campaign's
    # own work takes no time, so the block served nothing, and the command says so and ends 1 (money is not lost
    # silently).
    assert up.returncode == 1, (took, up.stderr[-4000:], report["stages"])
    assert "UNUSED BLOCK: the block was paid for and served nothing" in up.stdout, up.stdout
    assert "using capserve's deployments on" in up.stderr
    statuses = {line["name"]: line["status"] for line in report["stages"]}
    assert statuses["acquire"] == statuses["rollout"] == statuses["evaluate"] == "completed", report["stages"]
    assert report["lease"]["reservation_id"].startswith("cr-")  # the purchase was made, in the sandbox's EC2
    assert report["evaluation"]["verdict"] == "pass"
    assert report["teardown"]["deleted"]


def _deployments(install: Install, served: Served) -> dict[str, tuple[str, int]]:
    """flow/name → (entrypoint, number of schedules), read with the operator's install."""
    script = (
        "import json\nfrom prefect import get_client\n"
        "with get_client(sync_client=True) as c:\n"
        "    flows = {f.id: f.name for f in c.read_flows()}\n"
        "    print(json.dumps([[f'{flows[d.flow_id]}/{d.name}', d.entrypoint, len(d.schedules)]"
        " for d in c.read_deployments()]))\n"
    )
    done = subprocess.run([str(install.python), "-c", script], env=served.env, capture_output=True, text=True,
                          check=True, timeout=120)
    return {name: (entrypoint, schedules) for name, entrypoint, schedules in json.loads(done.stdout)}
