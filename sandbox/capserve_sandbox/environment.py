"""The whole sandbox: every far end the campaign talks to, started on loopback, torn down on exit.

Production code only sees configuration: environment variables and the endpoints in
``SandboxEndpoints``. Stand-ins: moto (AWS, extended where moto lacks an API: capacity
blocks, training plans, EKS/HyperPod state transitions and the nodes they make join), a fake
Kubernetes (API server, controllers, scheduler and a kubelet that runs pods as local processes:
docs/sandbox-kubelet.md), a local Hub serving a tiny K3-shaped checkpoint, and a local
OpenAI-compatible server (``inference``) for callers that evaluate an endpoint outside the cluster.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from capserve.core.environ import REGISTRY_TOOL_ENV
from capserve_sandbox.aws import moto_sandbox, patched_environ
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.clock_client import jumping, plugged
from capserve_sandbox.clock_server import clock_server
from capserve_sandbox.failures import FAILURES, Failure
from capserve_sandbox.hub import HubState, local_hub, publish_revision
from capserve_sandbox.kube import FakeKube, fake_kube
from capserve_sandbox.kube.kubelet.played_start import StandsFor
from capserve_sandbox.openai_server import SandboxConfig, serve
from capserve_sandbox.registry import registry_tool_command
from capserve_sandbox.revisions import RevisionSchedule

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Simulation:
    """Play a reservation on the sandbox's clock (``CLOCK.simulate``; its rule: ``capserve_sandbox.clock``): it holds
    while a run works and jumps to the next instant due when every run waits; the runs are scheduled ``rate``
    simulated seconds per wall second between the campaign's waypoints and ``near_rate`` around them
    (``capserve_sandbox.warp``); the clock stops at each waypoint until its run has started, ``hold`` (wall time)
    at most. ``revisions``: new revisions of the
    demo's model the Hub publishes while the campaign serves (True: good; False: its quality fails the gate),
    in that order (``capserve_sandbox.revisions``)."""

    rate: float = 5760.0
    near_rate: float = 60.0
    near: timedelta = timedelta(minutes=3)
    hold: timedelta = timedelta(minutes=2)
    tick_seconds: float = 0.2
    revisions: tuple[bool, ...] = ()
    # What the served checkpoint stands for: EKS resources and vLLM starts then take the time model's
    # durations on the block's clock (it skips through them), so the block shows the model's minutes.
    stands_for: StandsFor | None = None


@dataclass(frozen=True)
class SandboxEndpoints:
    aws: str
    region: str
    kube: str
    kube_server: FakeKube  # for tests that inject Kubernetes-side failures
    hub: str
    hub_state: HubState  # the local Hub's repos (publish_revision moves a branch)
    inference: str
    inference_note: str
    clock: str | None = None  # the simulated clock's URL (plugged in as CAPSERVE_CLOCK), when simulating
    revisions: RevisionSchedule | None = None  # the revisions the Hub publishes mid-block (simulating, if asked)

    def publish_revision(self, *, good: bool = True) -> str:
        """A new commit of the demo's model (``capserve-sandbox/tiny-k3``) on the local Hub; its sha.
        ``good=False``: a revision whose served quality fails the quality gate (``capserve_sandbox.hub.revisions``)."""
        return publish_revision(self.hub_state, good=good)

    def failures(self) -> list[Failure]:
        """The stand-ins that failed since this sandbox started (``capserve_sandbox.failures``): a campaign that
        ran beside one proved less than it says."""
        return FAILURES.failures()


@contextmanager
def sandbox(
    *,
    served_model_name: str,
    region: str = "us-east-2",
    kube_time_scale: float = 60.0,
    kube_serving: Literal["sandbox", "vllm"] = "sandbox",
    simulate: Simulation | None = None,
    failure_log: Path | None = None,
) -> Iterator[SandboxEndpoints]:
    """Start every stand-in; stop them all (and every pod's local process) on exit.

    ``kube_time_scale`` divides the fake Kubernetes' durations (probes, back-offs, deadlines), so a
    90-minute startup budget plays out in 90 s at 60; ``kube_serving`` picks what a vLLM pod runs
    (the sandbox OpenAI server, or the real vLLM from ``.venv-vllm``; give it a small scale: the real
    server needs a minute or two to start on a CPU). ``simulate`` plays the block on a simulated clock
    instead of jumping to its start: reservations turn active, AWS warns at end − 40 and terminates at
    end − 30 on that clock, and campaigns ask it through ``CAPSERVE_CLOCK`` (``capserve_sandbox.clock_client``).
    A stand-in that fails is reported (``failures()``), its traceback appended to ``failure_log`` (default: one in
    the temporary folder).
    """
    FAILURES.reset(failure_log)
    with ExitStack() as stack:
        # A bought block starts at the next 11:30 UTC or later; unless it simulates the window, the sandbox's AWS
        # jumps its clock to the start on the first look instead of making the demo wait. Either way the campaign
        # asks that clock for the time (CAPSERVE_CLOCK): the stages' times and the reservation's window are on one
        # clock, as on AWS.
        capacity_ext.reset()  # its reservations live beside moto's state, not in it
        capacity_ext.SETTINGS.auto_activate = simulate is None
        stack.callback(CLOCK.reset)
        clock_url = None
        revisions = None
        if simulate is not None:
            # Simulated: the block is reached by the clock running, not by a jump; the campaign registers its
            # scheduled runs' times so the clock slows down around them (capserve_sandbox.warp).
            revisions = RevisionSchedule(simulate.revisions, near=simulate.near) if simulate.revisions else None
            CLOCK.simulate(fast_rate=simulate.rate, near_rate=simulate.near_rate, near=simulate.near,
                           hold=simulate.hold,
                           extend=revisions.place if revisions is not None else None)
            clock_url = stack.enter_context(clock_server())
            stack.enter_context(patched_environ(plugged(clock_url)))
        else:
            stack.enter_context(patched_environ(jumping(stack.enter_context(clock_server()))))
        stack.callback(capacity_ext.reset)
        aws = stack.enter_context(moto_sandbox(region))
        # The image stage's registry tool (crane in production) is the sandbox's stand-in, copying into moto's ECR.
        stack.enter_context(patched_environ({REGISTRY_TOOL_ENV: registry_tool_command()}))
        # EKS clusters in the sandbox answer at the fake Kubernetes API; a cluster that becomes ACTIVE
        # runs CoreDNS & co., node groups that become ACTIVE make their nodes join, as on EKS.
        kube = stack.enter_context(fake_kube(time_scale=kube_time_scale, serving=kube_serving))
        eks_ext.attach_fake_kube(kube)
        stack.callback(eks_ext.reset)
        # Clusters and node groups still pass through CREATING, but turn ACTIVE at the first status
        # poll after creation: a real EKS cluster's ~10 minutes would only make the demo wait.
        eks_ext.BEHAVIOUR.describes_until_active = 1
        if simulate is not None and simulate.stands_for is not None:
            figures = simulate.stands_for.figures
            kube.kubelet.stands_for = simulate.stands_for
            eks_ext.BEHAVIOUR.modelled = eks_ext.ModelledDurations(
                control_plane_s=figures.control_plane_s,
                system_nodes_s=figures.system_nodes_s,
                gpu_nodes_s=figures.launch_and_join_s,
            )
            _log.info("sandbox: the served checkpoint stands for %.0f GB; EKS and vLLM take the modelled minutes",
                     simulate.stands_for.model_bytes / 1e9)
        hub_states: list[HubState] = []
        hub = stack.enter_context(local_hub(states=hub_states))
        # The local Hub serves plain files; the Xet protocol is for hf.co's storage only.
        stack.enter_context(patched_environ({"HF_HUB_DISABLE_XET": "1"}))
        # moto has no Price List API: the campaign's ledger prices from the packaged table, and says so.
        stack.enter_context(patched_environ({"CAPSERVE_COST__PRICE_LIST_API": "false"}))
        inference = stack.enter_context(serve(SandboxConfig(model=served_model_name)))
        if simulate is not None:
            stack.enter_context(_ticking(simulate.tick_seconds, revisions, hub_states[0]))
        yield SandboxEndpoints(
            aws=aws.endpoint_url,
            region=aws.region,
            kube=kube.url,
            kube_server=kube,
            hub=hub,
            hub_state=hub_states[0],
            inference=inference,
            clock=clock_url,
            revisions=revisions,
            inference_note=(
                "The endpoint evaluated here is the sandbox's local OpenAI-compatible server, standing in for "
                "the vLLM endpoint the rollout stage will create; its latencies are synthetic."
            ),
        )


TICK = "sandbox-clock-tick"


@contextmanager
def _ticking(every_s: float, revisions: RevisionSchedule | None, hub: HubState) -> Iterator[None]:
    """Time passes on its own in a simulated window: AWS's events and end − 30 terminations happen when due,
    not only when somebody describes a reservation, and the Hub publishes its revisions on time."""
    stop = threading.Event()

    def terminate_due() -> None:
        for done in capacity_ext.terminate_due():
            found = ", ".join(done.terminated) or "nothing running"
            _log.info("sandbox EC2: block %s at end − 30 min terminated %s", done.reservation_id, found)

    def tick() -> None:
        # Each step on its own: one that fails is reported (capserve_sandbox.failures) and the others, and the next
        # turn, still run; every turn stands alone.
        while not stop.wait(every_s):
            with FAILURES.guard(f"{TICK} thread (EventBridge's Capacity Block events)"):
                capacity_ext.deliver_due_events()
            with FAILURES.guard(f"{TICK} thread (EC2's end − 30 min terminations)"):
                terminate_due()
            if revisions is not None:
                with FAILURES.guard(f"{TICK} thread (the Hub's revisions)"):
                    revisions.publish_due(CLOCK.now(), hub)

    thread = threading.Thread(target=tick, name=TICK, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def stands_for(model_catalog: str | None, model_repo: str | None) -> StandsFor | None:
    """What a spec's served checkpoint stands for: the catalog model's bytes when the weights come from another
    repository (the sandbox's small stand-in checkpoint of it); None when the catalog model is served itself."""
    if model_catalog is None or model_repo is None:
        return None
    from capserve.core.catalog import get_model
    from capserve.core.planner.weights import weight_bytes_by_class
    from capserve.core.timeline import compile_shape

    model = get_model(model_catalog)
    # The architecture's part of the shape; the engine's arguments give the rest when the pod starts (served_shape).
    shape = compile_shape(model, max_num_seqs=256, gpu_family="blackwell", autotune_off=False)
    return StandsFor(model_bytes=sum(weight_bytes_by_class(model).values()), shape=shape)
