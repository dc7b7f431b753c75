"""Local processes of the sandbox's containers: started in their own session, logged, always reaped.

Every process gets its own process group (``start_new_session``), so stopping a container signals
everything it started (``sh`` → ``xargs`` → ``aws``; vLLM → its engine core). SIGTERM, then SIGKILL
after the grace period, as the kubelet does. The process groups still alive are also killed at
interpreter exit, so a test that fails half-way leaves no orphan.

A container ends when its main process ends. The processes it left behind in its group are killed
then, as the kernel kills every process of a PID namespace whose init process exits
(pid_namespaces(7)). So the exit is taken from the child watcher (``SubprocessProtocol.process_exited``),
never from the output pipe's end: a grandchild holding the pipe open (``cmd &``) would otherwise keep
the container "running" after its process is gone (CPython issue 119710: ``Process.wait()`` waits for
the pipes too).

A process that cannot be made (fork or exec refused: ``OSError``; the child watcher's thread refused:
``RuntimeError``) raises ``SpawnError``, which the kubelet reports as the container runtime does.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from capserve_sandbox.kube.kubelet.logs import InstanceLog

log = logging.getLogger(__name__)
_LIVE_GROUPS: set[int] = set()
DRAIN_S = 2.0  # wall seconds: how long the rest of the output may take once the group is gone
MAX_LINE_BYTES = 64 * 1024  # a longer line is logged in pieces (the kubelet splits long lines too)


def _kill_all() -> None:
    for group in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _LIVE_GROUPS.clear()


atexit.register(_kill_all)


class SpawnError(Exception):
    """The process could not be made; ``argv0`` and the OS's reason, for the container runtime's message."""

    def __init__(self, argv0: str, cause: BaseException) -> None:
        self.argv0 = argv0
        self.cause = cause
        super().__init__(f"{argv0}: {cause}")

    @property
    def exec_failed(self) -> bool:
        """The program itself could not be run (missing, not executable), as opposed to no process at all."""
        return isinstance(self.cause, (FileNotFoundError, PermissionError, NotADirectoryError))


class _Output(asyncio.SubprocessProtocol):
    """A process's output, line by line into its log, and its exit, each as soon as it happens."""

    def __init__(self, log_: InstanceLog, loop: asyncio.AbstractEventLoop) -> None:
        self.log = log_
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()  # the output pipe reached its end
        self._partial = b""

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        while len(self._partial) > MAX_LINE_BYTES:
            lines.append(self._partial[:MAX_LINE_BYTES])
            self._partial = self._partial[MAX_LINE_BYTES:]
        for line in lines:
            self.log.write(line.decode("utf-8", "replace"))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if self._partial:
            self.log.write(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        if not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _kill_orphan(creation: asyncio.Future[tuple[asyncio.SubprocessTransport, _Output]]) -> None:
    """A process made for a container that was stopped meanwhile: kill it and reap it."""
    if creation.cancelled() or creation.exception() is not None:
        return
    transport, output = creation.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(transport.get_pid(), signal.SIGKILL)

    async def reap() -> None:
        await output.exited
        transport.close()

    _ORPHANS.add(asyncio.ensure_future(reap()))
    for task in [t for t in _ORPHANS if t.done()]:
        _ORPHANS.discard(task)


_ORPHANS: set[asyncio.Future[None]] = set()  # strong references: the loop keeps only weak ones to tasks


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
        self._transport: asyncio.SubprocessTransport | None = None
        self._output: _Output | None = None
        if registry is not None:
            registry.add(self)

    @property
    def pid(self) -> int | None:
        return None if self._transport is None else self._transport.get_pid()

    @property
    def running(self) -> bool:
        return self._output is not None and not self._output.exited.done()

    async def start(self) -> None:
        """Make the process; raises SpawnError when the OS refuses (then there is no process)."""
        self.cwd.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        creation = asyncio.ensure_future(
            loop.subprocess_exec(
                lambda: _Output(self.log, loop),
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
            transport, self._output = await asyncio.shield(creation)
        except asyncio.CancelledError:
            # Stopped while the process was being made: it may still appear, and must not outlive us.
            creation.add_done_callback(_kill_orphan)
            raise
        except (OSError, RuntimeError) as exc:
            raise SpawnError(self.argv[0] if self.argv else "", exc) from exc
        self._transport = transport
        _LIVE_GROUPS.add(transport.get_pid())

    async def wait(self) -> int:
        """The main process's exit code, as soon as it exits (its group killed, its output read)."""
        assert self._transport is not None and self._output is not None  # noqa: S101 - narrows the type for mypy
        await asyncio.shield(self._output.exited)  # shielded: a cancelled wait must not lose the exit
        await self._end_group()
        code = self._transport.get_returncode()
        return exit_code(code if code is not None else 255)

    async def _end_group(self) -> None:
        """What is left of the container goes with its main process; then the rest of its output is read."""
        assert self._transport is not None and self._output is not None  # noqa: S101 - narrows the type for mypy
        self._signal(signal.SIGKILL)
        _LIVE_GROUPS.discard(self._transport.get_pid())
        try:
            await asyncio.wait_for(asyncio.shield(self._output.drained), timeout=DRAIN_S)
        except TimeoutError:
            # Something outside the group (it made its own session) still holds the pipe: stop reading it.
            log.warning("sandbox process %s ended but its output pipe is still held open", self.argv[:1])

    def _signal(self, sig: int) -> None:
        if self._transport is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._transport.get_pid(), sig)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the group, SIGKILL it after ``grace_s``; returns once the process is gone."""
        if self._transport is None or self._output is None:
            return
        if not self._output.exited.done():
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self._output.exited), timeout=grace_s)
            except TimeoutError:
                self._signal(signal.SIGKILL)
                await asyncio.shield(self._output.exited)
        await self._end_group()

    def release(self) -> None:
        """Close the process's asyncio transport (its pipes) once it has ended, while the loop still runs."""
        if self._transport is not None and self._transport.get_returncode() is not None:
            self._transport.close()

    def kill_now(self) -> None:
        """Synchronous SIGKILL of the group (shutdown path, when the event loop is going away)."""
        self._signal(signal.SIGKILL)
        if self._transport is not None:
            _LIVE_GROUPS.discard(self._transport.get_pid())


async def stop_all(registry: weakref.WeakSet[LocalProcess], grace_s: float) -> None:
    """Stop every process of ``registry`` still running and release every transport (the kubelet's last act)."""
    processes = list(registry)
    await asyncio.gather(*(p.stop(grace_s) for p in processes if p.running), return_exceptions=True)
    for process in processes:
        process.release()
