"""Progress a person can follow: the plain lines, the throttle that keeps a log short, the readings each wait takes
(nodes, image pull, vLLM's phase), the lines a wait logs, and how `capserve up` prints them off a terminal."""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client as k8s
from rich.console import Console

from capserve.cli.progress_view import ProgressFollower, ProgressView
from capserve.core.cluster.readiness import NodeExpectation, assess_nodes
from capserve.core.cluster.settings import KubeSettings
from capserve.core.progress import PREFIX, Progress, Throttle, unstamped
from capserve.core.rollout.image import pull_status
from capserve.core.rollout.startup_log import startup_phase, startup_progress
from capserve.tasks.progress import ProgressLine, ProgressReporter
from capserve.tasks.rollout.wait import _StartProgress

GIB = 2**30
CPU_LOG = (Path(__file__).parent / "fixtures" / "vllm-0.32-cpu-startup.log").read_text()


# --------------------------------------------------------------------------- the lines


def test_a_count_reads_done_of_total_with_its_detail() -> None:
    assert Progress("GPU nodes joined", done=1, total=2, detail="8 GPUs each").line() == (
        "GPU nodes joined 1/2 (8 GPUs each)"
    )


def test_bytes_read_in_gib_with_a_bar_and_a_percentage() -> None:
    line = Progress("staged", done=12.4 * GIB, total=40 * GIB, unit="bytes").line()
    assert line == "staged 12.4 of 40.0 GiB [===-------] 31 %"


def test_a_start_reads_its_phase_and_minutes_against_the_expected() -> None:
    line = startup_progress("", running_s=23 * 60, expected_s=75 * 60).line()
    assert line == "vLLM startup: loading weights, 23 of ~75 min expected"


def test_a_small_total_reads_in_the_unit_it_fills() -> None:
    assert Progress("staged", done=512 * 2**10, total=2**20 + 2**19, unit="bytes").line() == (
        "staged 0.5 of 1.5 MiB [===-------] 33 %"
    )


def test_a_line_holds_no_control_character() -> None:
    lines = [
        Progress("staged", done=3, total=7, unit="bytes").line(),
        Progress("image pull", detail="vllm/vllm-openai:v0.32.0 pulling").line(),
        Progress("vLLM startup", detail="compiling", elapsed_s=60).line(),
    ]
    assert all(ch.isprintable() for line in lines for ch in line)


# --------------------------------------------------------------------------- the throttle


def test_the_first_reading_is_worth_a_line() -> None:
    assert Throttle().worth(Progress("staged", done=0, total=100), now=0.0)


def test_the_same_line_again_is_dropped_however_late() -> None:
    throttle = Throttle(every_s=60)
    throttle.worth(Progress("GPU nodes joined", done=0, total=2), now=0.0)
    assert not throttle.worth(Progress("GPU nodes joined", done=0, total=2), now=3600.0)


def test_a_move_under_the_step_is_dropped_and_one_of_the_step_is_printed() -> None:
    throttle = Throttle(step=0.10, every_s=60)
    throttle.worth(Progress("staged", done=0, total=100), now=0.0)
    assert not throttle.worth(Progress("staged", done=9, total=100), now=1.0)
    assert throttle.worth(Progress("staged", done=10, total=100), now=2.0)


def test_a_new_phase_is_printed_at_once() -> None:
    throttle = Throttle(every_s=60)
    throttle.worth(Progress("vLLM startup", detail="loading weights", elapsed_s=0, expected_s=4500), now=0.0)
    assert throttle.worth(Progress("vLLM startup", detail="compiling", elapsed_s=60, expected_s=4500), now=1.0)


def test_a_changed_line_is_printed_once_every_s_has_passed() -> None:
    throttle = Throttle(step=0.10, every_s=60)
    throttle.worth(Progress("vLLM startup", detail="loading weights", elapsed_s=0, expected_s=4500), now=0.0)
    assert not throttle.worth(Progress("vLLM startup", detail="loading weights", elapsed_s=120, expected_s=4500), 59)
    assert throttle.worth(Progress("vLLM startup", detail="loading weights", elapsed_s=180, expected_s=4500), 60)


def test_the_end_is_printed_even_within_the_step() -> None:
    throttle = Throttle(step=0.10, every_s=60)
    throttle.worth(Progress("files published to S3", done=95, total=100), now=0.0)
    assert throttle.worth(Progress("files published to S3", done=100, total=100), now=1.0)


# --------------------------------------------------------------------------- what each wait reads


def _node(name: str, *, ready: bool, gpus: int) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_nodes_read_as_joined_of_expected_and_how_many_are_ready_with_their_gpus() -> None:
    expectation = NodeExpectation(count=2, gpus_per_node=8)
    readiness = assess_nodes([_node("ip-10-0-1-2", ready=True, gpus=0)], expectation)
    assert readiness.progress(8).line() == "GPU nodes joined 1/2 (0 ready with 8 GPUs each)"


def _event(reason: str, uid: str, message: str, at: str = "2026-12-06T11:40:00Z") -> dict[str, object]:
    return {"reason": reason, "involvedObject": {"uid": uid}, "message": message, "lastTimestamp": at}


def test_an_image_is_pulling_until_every_pod_that_began_pulling_it_has_pulled_it() -> None:
    image = "1234.dkr.ecr.us-east-2.amazonaws.com/vllm@sha256:ab"
    events = [
        _event("Pulling", "a", f'Pulling image "{image}"'),
        _event("Pulling", "b", f'Pulling image "{image}"'),
        _event("Pulled", "a", f'Successfully pulled image "{image}" in 3m2s (3m2s including waiting)'),
    ]
    assert pull_status(events, {"a", "b"})[image][0] == "pulling"
    done = [*events, _event("Pulled", "b", f'Successfully pulled image "{image}" in 3m (3m including waiting)')]
    assert pull_status(done, {"a", "b"})[image][0] == "pulled"


def test_an_image_pull_is_told_at_its_events_time_not_at_the_look() -> None:
    image = "1234.dkr.ecr.us-east-2.amazonaws.com/vllm@sha256:ab"
    events = [
        _event("Pulling", "a", f'Pulling image "{image}"', at="2026-12-06T11:45:00Z"),
        _event("Pulled", "a", f'Successfully pulled image "{image}" in 3m (3m including waiting)',
               at="2026-12-06T11:48:00Z"),
    ]
    assert pull_status(events, {"a"}) == {image: ("pulled", datetime(2026, 12, 6, 11, 48, tzinfo=UTC))}


def test_another_pods_pull_is_not_this_rollouts() -> None:
    assert pull_status([_event("Pulling", "old", 'Pulling image "x"')], {"new"}) == {}


def test_the_phase_under_way_follows_the_last_milestone_vllm_logged() -> None:
    before_weights = CPU_LOG.split("Loading weights took")[0]
    assert startup_phase(before_weights) == "loading weights"
    assert startup_phase(before_weights + "Loading weights took 1.26 seconds\n") == "compiling (torch.compile)"
    assert startup_phase(CPU_LOG) == "listening"


# --------------------------------------------------------------------------- a wait's lines, in its run's log


def test_a_wait_of_a_hundred_readings_logs_eleven_prefixed_lines(caplog: pytest.LogCaptureFixture) -> None:
    ticks = iter(range(1000))
    reporter = ProgressReporter(Throttle(step=0.10, every_s=3600), clock=lambda: float(next(ticks)))
    with caplog.at_level(logging.INFO):
        for done in range(101):  # one reading per poll: 0 %, 1 %, … 100 %
            reporter.report(Progress("staged", done=done * GIB, total=100 * GIB, unit="bytes"))
    logged = [record.getMessage() for record in caplog.records if record.getMessage().startswith(PREFIX)]
    assert [unstamped(message.removeprefix(PREFIX))[1] for message in logged] == reporter.lines
    assert [line.split("] ")[1] for line in reporter.lines] == [f"{p} %" for p in range(0, 101, 10)]


# --------------------------------------------------------------------------- `capserve up` off a terminal


def test_off_a_terminal_each_line_is_printed_once_plain_with_wall_time_and_the_blocks_clock() -> None:
    out = io.StringIO()
    start = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
    view = ProgressView(Console(file=out, force_terminal=False, width=200), block_start=lambda: start)
    wall = datetime(2026, 12, 4, 23, 58, 1, 123456, tzinfo=UTC)
    view.show([
        ProgressLine(wall, "serve-k3-demo", "GPU nodes joined 1/1 (1 ready with 8 GPUs each)",
                     block_at=start + timedelta(minutes=31)),
        ProgressLine(wall, "serve-k3-demo", "vLLM startup: loading weights, 23 of ~75 min expected",
                     block_at=start + timedelta(hours=2, minutes=14)),
    ])
    view.close()
    assert out.getvalue() == (
        "23:58:01  block +00:31  serve-k3-demo: GPU nodes joined 1/1 (1 ready with 8 GPUs each)\n"
        "23:58:01  block +02:14  serve-k3-demo: vLLM startup: loading weights, 23 of ~75 min expected\n"
    )
    assert "\x1b" not in out.getvalue()


def test_the_follower_reads_the_server_at_most_every_few_seconds_and_from_where_it_left_off() -> None:
    since = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
    asked: list[datetime] = []

    def read(campaign_id: str, *, after: datetime) -> tuple[list[ProgressLine], datetime]:
        asked.append(after)
        return [], after + timedelta(seconds=1)

    now = [0.0]
    follower = ProgressFollower("k3-demo", since, ProgressView(Console(file=io.StringIO())), read=read,
                                clock=lambda: now[0])
    follower.poll()
    now[0] = 1.0
    follower.poll()  # too soon: no read
    now[0] = 6.0
    follower.poll()
    assert asked == [since, since + timedelta(seconds=1)]


def test_a_look_at_the_start_that_the_api_refuses_tells_nothing_and_does_not_end_the_wait() -> None:
    api = k8s.ApiClient()

    def refuse(*_: object, **__: object) -> None:
        raise k8s.ApiException(status=503, reason="Service Unavailable")

    api.call_api = refuse  # type: ignore[method-assign]
    told = _StartProgress(api, "default", "vllm-blue-0", 4500.0, KubeSettings())
    told([{"metadata": {"name": "vllm-blue-0", "uid": "u"}, "status": {}}])
    assert told.pulls.lines == [] and told.engine.lines == []
