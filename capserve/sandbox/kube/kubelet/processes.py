"""Local processes of the sandbox's containers: started in their own session, logged, always reaped.

Every process gets its own process group (``start_new_session``), so stopping a container signals
everything it started (``sh`` → ``xargs`` → ``aws``; vLLM → its engine core). SIGTERM, then SIGKILL
after the grace period, as the kubelet does. The process groups still alive are also killed at
interpreter exit, so a test that fails half-way leaves no orphan.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import socket
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from capserve.sandbox.kube.kubelet.logs import InstanceLog

_LIVE_GROUPS: set[int] = set()


def _kill_all() -> None:
    for group in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _LIVE_GROUPS.clear()


atexit.register(_kill_all)


def _kill_orphan(creation: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if creation.cancelled() or creation.exception() is not None:
        return
    process = creation.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    asyncio.ensure_future(_drain(process))


async def _drain(process: asyncio.subprocess.Process) -> None:
    if process.stdout is not None:
        await process.stdout.read()
    await process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def exit_code(returncode: int) -> int:
    """A signal death as a container runtime reports it: 128 + signal number."""
    return 128 - returncode if returncode < 0 else returncode


class LocalProcess:
    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log: InstanceLog,
        registry: weakref.WeakSet[LocalProcess] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.log = log
        self._process: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        if registry is not None:
            registry.add(self)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        creation = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self.env,
                cwd=str(self.cwd),
                start_new_session=True,
            )
        )
        try:
            self._process = await asyncio.shield(creation)
        except asyncio.CancelledError:
            # Stopped while the process was being made: it may still appear, and must not outlive us.
            creation.add_done_callback(_kill_orphan)
            raise
        _LIVE_GROUPS.add(self._process.pid)
        self._pump = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        while True:
            line = await self._process.stdout.readline()
            if not line:
                return
            self.log.write(line.decode("utf-8", "replace").rstrip("\n"))

    async def wait(self) -> int:
        assert self._process is not None
        code = await self._process.wait()
        _LIVE_GROUPS.discard(self._process.pid)
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        return exit_code(code)

    def _signal(self, sig: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, sig)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the group, SIGKILL it after ``grace_s``; returns once the process is gone."""
        if self._process is None:
            return
        if self._process.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), timeout=grace_s)
            except TimeoutError:
                self._signal(signal.SIGKILL)
                await self._process.wait()
        self._signal(signal.SIGKILL)  # whatever the leader left behind in its group
        _LIVE_GROUPS.discard(self._process.pid)
        if self._pump is not None:
            # Read the pipe to its end: only then does asyncio release the process's transport.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._pump), timeout=2.0)

    def release(self) -> None:
        """Close the process's asyncio transport (its pipes) once it has ended, while the loop still runs."""
        transport = getattr(self._process, "_transport", None)  # asyncio keeps no public handle on it
        if transport is not None and self._process is not None and self._process.returncode is not None:
            transport.close()

    def kill_now(self) -> None:
        """Synchronous SIGKILL of the group (shutdown path, when the event loop is going away)."""
        self._signal(signal.SIGKILL)
        if self._process is not None:
            _LIVE_GROUPS.discard(self._process.pid)


async def stop_all(registry: weakref.WeakSet[LocalProcess], grace_s: float) -> None:
    """Stop every process of ``registry`` still running and release every transport (the kubelet's last act)."""
    processes = list(registry)
    await asyncio.gather(*(p.stop(grace_s) for p in processes if p.running), return_exceptions=True)
    for process in processes:
        process.release()
