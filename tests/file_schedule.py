"""Which file a `make test` process runs next (an xdist scheduler; tests/conftest.py installs it for `--dist loadfile`).

xdist's file scheduler hands a process its next file as soon as the running one has two tests or fewer left, and
that file's tests wait behind them. Behind a short test that costs nothing; behind a long one (a whole campaign on a
server, the real vLLM's start) the next file waits minutes while other processes run out of work: on a fresh clone
with seven processes, the demo's file waited 240 s behind the real vLLM's one test and the run ended 84 s later
than with six.

Here a process gets its next file when its running file has one test left (a worker must know its next test before
it starts one, so that hand-off costs one message, not a test), and what it gets depends on that last test:

- behind a long test (a file of ``LONG_FILES``, or a file whose finished tests averaged over ``LONG_TEST_S``), the
  last file of the queue: the queue runs longest first (tests/conftest.py), so that is one of the shortest, and
  nothing long waits;
- otherwise the first file of the queue.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

# The files that take minutes, longest first (wall seconds in a process of a fresh-clone `make test` on a quiet
# 2-core machine, December 2026). tests/conftest.py starts the run with them in this order; the order only decides
# how soon the run ends, never what a test proves.
LONG_FILES = (
    "tests/server/test_window_on_a_server.py",  # 479 s
    "tests/server/test_sigterm.py",  # 442
    "tests/server/test_fault_matrix.py",  # 419
    "tests/eval/test_vllm_rollout.py",  # 395
    "tests/server/test_up_on_a_server.py",  # 379
    "tests/server/test_wheel_deploy.py",  # 242
    "tests/flows/test_rollout.py",  # 223
    "tests/flows/test_campaign.py",  # 204
    "tests/server/test_team_server.py",  # 189
    "tests/flows/test_campaign_permissions.py",  # 168
    "tests/server/test_slot_lease_restart.py",  # 161
    "tests/server/test_deploy_keeps_scheduled_runs.py",  # 139
    "tests/flows/test_redeploy.py",  # 136
)
LONG_TEST_S = 10.0


class ShortBehindLong(LoadFileScheduling):
    """xdist's file scheduler, but a file queued behind a long test is one of the shortest (see the module)."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.seconds: dict[str, list[float]] = {}  # a file's finished tests' durations

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        nodeid = self.registered_collections[node][item_index]
        self.seconds.setdefault(self._split_scope(nodeid), []).append(duration)
        super().mark_test_complete(node, item_index, duration)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)

    def _assign_work_unit(self, node: Any) -> None:
        if self._behind_a_long_test(node):
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        super()._assign_work_unit(node)

    def _behind_a_long_test(self, node: Any) -> bool:
        """Whether a file given to ``node`` now would wait behind a long test."""
        running = [
            scope for scope, tests in self.assigned_work[node].items() if not all(tests.values())
        ]
        return any(self._is_long(scope) for scope in running)

    def _is_long(self, scope: str) -> bool:
        if scope in LONG_FILES:
            return True
        finished = self.seconds.get(scope, [])
        return bool(finished) and sum(finished) / len(finished) > LONG_TEST_S
