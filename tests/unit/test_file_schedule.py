"""Which file a `make test` process runs next (tests/file_schedule.py): never a long one behind a long test."""

from __future__ import annotations

from types import SimpleNamespace

from file_schedule import LONG_FILES, ShortBehindLong

LONG = LONG_FILES[0]
FILES = {
    LONG: 1,
    "tests/aws/test_b.py": 3,
    "tests/aws/test_c.py": 2,
    "tests/unit/test_d.py": 1,
    "tests/unit/test_e.py": 1,
}
COLLECTION = [f"{path}::test_{n}" for path, count in FILES.items() for n in range(count)]


class Worker:
    """What the scheduler sees of an xdist worker: the tests it was sent, and whether it was told to stop."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(COLLECTION[index] for index in indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def files(self) -> list[str]:
        return list(dict.fromkeys(nodeid.split("::")[0] for nodeid in self.sent))


def scheduled(workers: int = 1) -> tuple[ShortBehindLong, list[Worker]]:
    config = SimpleNamespace(
        getvalue=lambda name: {"tx": [f"{workers}*popen"]}[name],
        option=SimpleNamespace(loadscopereorder=False),
    )
    scheduler = ShortBehindLong(config)
    nodes = [Worker() for _ in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, COLLECTION)
    scheduler.schedule()
    return scheduler, nodes


def finish(scheduler: ShortBehindLong, node: Worker, nodeid: str, seconds: float) -> None:
    scheduler.mark_test_complete(node, COLLECTION.index(nodeid), seconds)


def test_the_file_queued_behind_a_long_files_last_test_is_the_queues_last() -> None:
    _, [node] = scheduled()

    assert node.files() == [LONG, "tests/unit/test_e.py"]


def test_behind_a_short_test_the_next_file_is_the_queues_first() -> None:
    scheduler, [node] = scheduled()
    finish(scheduler, node, f"{LONG}::test_0", 300.0)
    finish(scheduler, node, "tests/unit/test_e.py::test_0", 0.1)

    assert node.files() == [LONG, "tests/unit/test_e.py", "tests/aws/test_b.py"]


def test_a_file_whose_tests_took_minutes_counts_as_long() -> None:
    scheduler, [node] = scheduled()
    finish(scheduler, node, f"{LONG}::test_0", 300.0)
    finish(scheduler, node, "tests/unit/test_e.py::test_0", 0.1)
    for n in range(2):  # test_b's last test is left: what waits behind it is test_d, the queue's last
        finish(scheduler, node, f"tests/aws/test_b.py::test_{n}", 60.0)

    assert node.files()[-1] == "tests/unit/test_d.py"


def test_a_file_is_handed_over_only_when_the_running_one_has_one_test_left() -> None:
    scheduler, [node] = scheduled()
    finish(scheduler, node, f"{LONG}::test_0", 300.0)
    finish(scheduler, node, "tests/unit/test_e.py::test_0", 0.1)
    finish(scheduler, node, "tests/aws/test_b.py::test_0", 0.1)  # two of test_b's three left

    assert node.files() == [LONG, "tests/unit/test_e.py", "tests/aws/test_b.py"]
