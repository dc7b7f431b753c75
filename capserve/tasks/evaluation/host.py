"""What this host gives the load generator: usable cores and the open-file limit."""

from __future__ import annotations

import os
import resource

from capserve.core.evaluation.client_limits import ClientCapacity, client_capacity
from capserve.core.evaluation.spec import LoadSpec

# What "unlimited" open files means in practice (the kernel's default nr_open).
_UNLIMITED_FILES = 1_048_576


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def open_files_limit() -> int:
    """The hard open-file limit: a generator process raises its soft limit up to it (loadgen)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UNLIMITED_FILES if hard == resource.RLIM_INFINITY else int(hard)


def host_capacity(load: LoadSpec) -> ClientCapacity:
    """The load client's capacity on this host for ``load``."""
    return client_capacity(load, cores=usable_cores(), open_files_limit=open_files_limit())
