"""Running one task over many inputs with a bound on how many run at once.

Prefect's ``Task.map`` submits everything at once; a 1.5 TB checkpoint in a thousand files must not
open a thousand downloads. ``map_bounded`` keeps at most ``limit`` task runs in flight (each with its
own retries, from its decorator) and returns the results in call order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from prefect import Task
from prefect.futures import PrefectFuture, as_completed

R = TypeVar("R")


def map_bounded(
    task: Task[..., R],
    calls: Sequence[Mapping[str, Any]],
    limit: int,
    on_done: Callable[[R], None] | None = None,
) -> list[R]:
    """Submit ``task`` once per keyword-argument mapping, at most ``limit`` at a time; results in call order.

    ``on_done`` sees each result as it finishes (progress bars). The first failure (after its task's own
    retries) raises at once; no further calls are submitted.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    results: dict[int, R] = {}
    pending: dict[PrefectFuture[R], int] = {}
    queue = iter(enumerate(calls))

    def fill() -> None:
        for index, kwargs in queue:
            pending[task.submit(**kwargs)] = index
            if len(pending) >= limit:
                return

    fill()
    while pending:
        done = next(as_completed(list(pending)))
        result = done.result()
        results[pending.pop(done)] = result
        if on_done is not None:
            on_done(result)
        fill()
    return [results[i] for i in range(len(calls))]
