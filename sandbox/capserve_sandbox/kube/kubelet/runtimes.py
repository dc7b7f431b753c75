"""What a container becomes in the sandbox, chosen by its image (docs/sandbox-kubelet.md, "Runtimes").

- **vLLM** (``vllm/vllm-openai*`` images, or a command that runs ``vllm serve``): the arguments are
  parsed as vLLM parses them, with the product's copy of its parser and the snapshot of the image's
  vLLM version (``capserve.core.vllm``: the one preflight checks the campaign with); the ``--model``
  directory is checked as vLLM would read it (``config.json``, ``model.safetensors.index.json``,
  every file the index names); then a local server answers on a free port: the sandbox OpenAI server (serving
  ``--served-model-name``, enforcing ``--api-key``) or, when the fake is configured for it, the real
  vLLM from ``.venv-vllm`` with the pod's arguments (paths mapped to the node's directories). A
  leader of a multi-node server (``--nnodes`` > 1, or DP with remote ranks) listens only once every
  remote rank has joined, as vLLM does; a ``--headless`` rank checks its arguments against its
  leader's (same sizes, rank in range) and then idles.
- **tool** (the aws-cli image, and ``sh -c`` containers of it; the Lambda Python image's ``python3``): the real
  command runs locally with an ``aws`` shim first on PATH, and a ``python3`` whose botocore asks the shim before
  each S3 call (``aws_shim.py``: ``aws s3 cp|sync|ls`` against the sandbox's
  S3), and ``getent hosts`` / ``curl`` answered from the pod's network (``net_tools.py``), env values
  and arguments under a mount rewritten to the node's directory.
- **placeholder** (everything else: device plugins, controllers, CoreDNS): runs until stopped (in a
  pod that does not restart on success, it exits 0) and passes its probes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capserve.core.rollout.efa_image import efa_stack_found, efa_stack_problem
from capserve.core.rollout.references import expand
from capserve.core.vllm.parser import ServeArgs, VllmArgsError, parse_serve_args, serve_argv
from capserve.core.vllm.rules import tool_choice_auto_refusal
from capserve.core.vllm.versions import image_version
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube.aws_shim import INSTANCE_ROLE_ENV
from capserve_sandbox.kube.kubelet.faults import FaultKind
from capserve_sandbox.kube.kubelet.logs import InstanceLog
from capserve_sandbox.kube.kubelet.played_start import (
    PlayedStart,
    engine_line,
    leave_compiled,
    listening_line,
    played_start,
    server_key,
    vllm_line,
    weights_storage,
)
from capserve_sandbox.kube.kubelet.process_hold import ProcessHold
from capserve_sandbox.kube.kubelet.processes import LocalProcess, SpawnError, free_port
from capserve_sandbox.kube.kubelet.volumes import rewrite_paths, to_host
from capserve_sandbox.kube.net_tools import PARTY_ENV, POD_ENV
from capserve_sandbox.openai_server import quality_of_checkpoint
from capserve_sandbox.registry import image_files

if TYPE_CHECKING:
    from capserve_sandbox.kube.kubelet import Kubelet

# The aws CLI's images, and AWS's Lambda Python base image (python3 with boto3: the staging copy's).
TOOL_IMAGES = ("public.ecr.aws/aws-cli/aws-cli", "amazon/aws-cli", "public.ecr.aws/lambda/python")
VLLM_IMAGES = ("vllm/vllm-openai", "docker.io/vllm/vllm-openai", "public.ecr.aws/q9t5s3a7/vllm")
# Passed through to tool containers: how the pod's AWS SDK reaches the sandbox's AWS (IRSA stands in).
AWS_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_EC2_METADATA_DISABLED",
)


@dataclass
class Exit:
    code: int
    reason: str  # Completed | Error | OOMKilled
    message: str | None = None


class ContainerExit(Exception):
    """The container ended before (or while) starting: its exit code and what it printed."""

    def __init__(self, code: int, lines: list[str], reason: str | None = None, message: str | None = None) -> None:
        super().__init__("\n".join(lines))
        self.code = code
        self.lines = lines
        self.reason = reason
        self.message = message  # the terminated state's message (the runtime's own words), if any


# containerd's CRI plugin reports a container whose process could not be started as terminated with this
# reason and exit code (pkg/cri/server/helpers.go: errorStartReason, errorStartExitCode "the same with
# Docker's behavior"), its message runc's error, and a start time of zero.
START_ERROR, START_ERROR_CODE = "StartError", 128
START_ERROR_STARTED_AT = "1970-01-01T00:00:00Z"


def start_error(error: SpawnError) -> ContainerExit:
    """The container runtime's StartError for a process the OS would not make (docs/sandbox-kubelet.md)."""
    if error.exec_failed:  # runc looks a bare name up in $PATH, and stats a path
        why = f'exec: "{error.argv0}": executable file not found in $PATH'
        if "/" in error.argv0:
            why = f'exec: "{error.argv0}": stat {error.argv0}: no such file or directory'
        if isinstance(error.cause, PermissionError):
            why = f'exec: "{error.argv0}": permission denied'
    else:  # no process at all (fork refused, no thread to watch it): the local OS's own reason
        why = str(error.cause)
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        f"failed: unable to start container process: error during container init: {why}"
    )
    return ContainerExit(START_ERROR_CODE, [], START_ERROR, message)


@dataclass
class ContainerContext:
    kubelet: Kubelet
    pod: dict[str, Any]
    container: dict[str, Any]
    node: str
    pod_ip: str
    env: dict[str, str]
    mounts: list[tuple[str, Path]]
    log: InstanceLog
    scratch: Path
    start_number: int  # 0 for the first start of this container in this pod

    @property
    def pod_name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])

    @property
    def image(self) -> str:
        return str(self.container.get("image") or "")

    def argv(self) -> tuple[list[str], list[str]]:
        """command and args with ``$(VAR)`` expanded, as the kubelet passes them to the runtime."""
        command = [expand(str(word), self.env) for word in self.container.get("command") or []]
        args = [expand(str(word), self.env) for word in self.container.get("args") or []]
        return command, args


class Runtime:
    """One run of a container. ``ports`` maps container ports to the local ports actually served."""

    passes_probes_offline = False
    can_become_ready = True
    clock_hold: ProcessHold | None = None  # on a playing block, its process holds the clock while it runs

    def __init__(self, ctx: ContainerContext) -> None:
        self.ctx = ctx
        self.ports: dict[int, int] = {}
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        """Start the container; raise ContainerExit when it dies at once (bad arguments, missing files)."""

    async def wait(self) -> Exit:
        await self._stopped.wait()
        return Exit(143, "Error")

    async def stop(self, grace_s: float) -> None:
        self._stopped.set()

    def kill_now(self) -> None:
        self._stopped.set()


class ProcessRuntime(Runtime):
    process: LocalProcess | None = None

    async def wait(self) -> Exit:
        if self.process is None:
            return await super().wait()
        code = await self.process.wait()
        return Exit(code, "Completed" if code == 0 else "Error")

    async def stop(self, grace_s: float) -> None:
        if self.process is not None:
            await self.process.stop(grace_s)
        await super().stop(grace_s)

    def kill_now(self) -> None:
        if self.process is not None:
            self.process.kill_now()
        super().kill_now()


# ---------------------------------------------------------------- placeholder and faults


class Placeholder(Runtime):
    passes_probes_offline = True

    async def start(self) -> None:
        self.ctx.log.write(f"capserve sandbox: {self.ctx.image} is not run here; a placeholder stands in for it")

    async def wait(self) -> Exit:
        if (self.ctx.pod.get("spec") or {}).get("restartPolicy") in ("Never", "OnFailure"):
            await asyncio.sleep(0.05)  # a batch container that has nothing to do succeeds
            return Exit(0, "Completed")
        return await super().wait()


class Faulty(Runtime):
    """A container that dies on request: exit 1 (crash) or killed for memory (137, OOMKilled).

    It never reports Ready: a process that is about to die would not pass a readiness check.
    """

    passes_probes_offline = True
    can_become_ready = False

    def __init__(self, ctx: ContainerContext, kind: FaultKind, after_s: float) -> None:
        super().__init__(ctx)
        self.kind = kind
        self.after_s = after_s

    async def start(self) -> None:
        self.ctx.log.write(f"capserve sandbox: injected fault {self.kind.value} on {self.ctx.pod_name}")

    async def wait(self) -> Exit:
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout=max(self.after_s, 0.05))
            return Exit(143, "Error")
        except TimeoutError:
            pass
        if self.kind is FaultKind.OOM:
            return Exit(137, "OOMKilled")
        self.ctx.log.write("fatal: injected crash (capserve sandbox fault)")
        return Exit(1, "Error")


# ---------------------------------------------------------------- tool images


class ToolRuntime(ProcessRuntime):
    """A tool container's command, run locally; on a playing block its process holds the clock while it runs
    (``ProcessHold``: what it does in wall time costs the block nothing; its copies' modelled time is what passes)."""

    clock_hold: ProcessHold

    def __init__(self, ctx: ContainerContext) -> None:
        super().__init__(ctx)
        self.clock_hold = ProcessHold()

    async def start(self) -> None:
        ctx = self.ctx
        command, args = ctx.argv()
        argv = [*command, *args] if command else ["aws", *args]  # the aws-cli image's entrypoint is `aws`
        argv = [rewrite_paths(word, ctx.mounts) for word in argv]
        if argv and argv[0] in ("/bin/sh", "/bin/bash", "/usr/bin/env"):
            argv[0] = argv[0].rsplit("/", 1)[1]
        env = {key: rewrite_paths(value, ctx.mounts) for key, value in ctx.env.items()}
        env.update({key: os.environ[key] for key in AWS_ENV if key in os.environ})
        devices = ctx.kubelet.node_devices.get(ctx.node)
        if devices is not None and devices.instance_role_arn:
            # The pod's AWS SDK gets the instance's role credentials from IMDS: under IAM enforcement they are the
            # role's own, which moto checks; otherwise the shim checks the role's policies itself.
            from capserve_sandbox.aws_ext.iam_rules import instance_credentials

            issued = instance_credentials(devices.instance_role_arn, env.get("AWS_REGION") or "us-east-1")
            if issued is not None:
                env.update(issued)
            else:
                env[INSTANCE_ROLE_ENV] = devices.instance_role_arn
        env["PATH"] = f"{ctx.kubelet.shim_dir()}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        env[POD_ENV] = str(ctx.pod["metadata"]["uid"])  # which pod's network the shims answer for
        env[PARTY_ENV] = self.clock_hold.token  # whose work a copy it asks the shims for interrupts
        env["HOME"] = str(ctx.scratch)
        env["TMPDIR"] = str(ctx.scratch)
        workdir = ctx.container.get("workingDir")
        cwd = (to_host(workdir, ctx.mounts) if workdir else None) or ctx.scratch
        self.process = LocalProcess(argv, env, cwd, ctx.log, ctx.kubelet.processes)
        try:
            await self.process.start()
        except SpawnError as error:
            self.process = None
            raise start_error(error) from error

    def kill_now(self) -> None:  # the fake stops: its loop may not run the runner's release
        super().kill_now()
        self.clock_hold.release()


# ---------------------------------------------------------------- vLLM


def is_vllm(container: Mapping[str, Any]) -> bool:
    image = str(container.get("image") or "")
    if image.startswith(VLLM_IMAGES):
        return True
    command = [str(w) for w in container.get("command") or []]
    words = " ".join(command + [str(w) for w in container.get("args") or []])
    return "vllm serve" in words or "vllm.entrypoints" in words


def is_tool(container: Mapping[str, Any]) -> bool:
    return str(container.get("image") or "").startswith(TOOL_IMAGES)


def check_model_dir(model: str, mounts: list[tuple[str, Path]]) -> Path:
    """The host directory of ``--model``, checked as vLLM would read it; ContainerExit(1) otherwise."""
    if not model.startswith("/"):
        raise ContainerExit(
            1,
            [
                f"OSError: cannot fetch {model!r} from the Hugging Face Hub: the capserve sandbox serves only "
                "local model directories (mount the staged weights and pass their path as --model)"
            ],
        )
    host = to_host(model, mounts)
    invalid = [
        f"ValueError: Invalid repository ID or local directory specified: '{model}'.",
        "Please verify the following requirements:",
        "1. Provide a valid Hugging Face repository ID.",
        "2. Specify a local directory that contains a recognized configuration file.",
        "   - For Hugging Face models: ensure the presence of a 'config.json'.",
    ]
    if host is None or not host.is_dir() or not (host / "config.json").is_file():
        raise ContainerExit(1, invalid)
    index_path = host / "model.safetensors.index.json"
    if not index_path.is_file():
        if not list(host.glob("*.safetensors")):
            raise ContainerExit(1, [f"RuntimeError: Cannot find any model weights with `{model}`"])
        return host
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        files = sorted(set(index["weight_map"].values()))
    except (ValueError, KeyError, TypeError) as exc:
        raise ContainerExit(
            1, [f"json.decoder.JSONDecodeError: {model}/model.safetensors.index.json is not a valid index: {exc}"]
        ) from exc
    for name in files:
        if not (host / name).is_file():
            raise ContainerExit(1, [f"FileNotFoundError: [Errno 2] No such file or directory: '{model}/{name}'"])
    return host


# Starts the local server of a vLLM container: (context, parsed args, host model dir, local port, listen delay).
ServeFn = Callable[[ContainerContext, ServeArgs, Path, int, float], LocalProcess]


@dataclass
class VllmGroup:
    """One distributed vLLM server: its leader's arguments and the remote ranks that joined."""

    leader: ServeArgs
    expected: int
    joined: dict[int, str] = field(default_factory=dict)  # rank -> pod uid
    changed: asyncio.Event = field(default_factory=asyncio.Event)


def remote_ranks(args: ServeArgs) -> tuple[int, str | None]:
    """(how many other nodes a leader waits for, the address they must dial) for its layout."""
    if args.nnodes > 1:
        return args.nnodes - 1, args.get("master_addr")
    dp, local = int(args.get("data_parallel_size") or 1), args.get("data_parallel_size_local")
    if local and dp > int(local):
        return (dp - int(local)) // int(local), args.get("data_parallel_address")
    return 0, None


def worker_rank(args: ServeArgs) -> tuple[int, str | None]:
    """(rank among the nodes, leader address) of a ``--headless`` rank."""
    if args.nnodes > 1:
        return args.node_rank, args.get("master_addr")
    local = int(args.get("data_parallel_size_local") or 1)
    return int(args.get("data_parallel_start_rank") or 0) // max(local, 1), args.get("data_parallel_address")


class VllmRuntime(ProcessRuntime):
    def __init__(self, ctx: ContainerContext, serve: ServeFn) -> None:
        super().__init__(ctx)
        self._serve = serve
        self.args: ServeArgs | None = None
        self._serving: asyncio.Future[None] | None = None
        self._group: VllmGroup | None = None  # the distributed server this leader opened

    def _fail(self, code: int, lines: list[str]) -> ContainerExit:
        for line in lines:
            self.ctx.log.write(line)
        return ContainerExit(code, lines)

    async def start(self) -> None:
        ctx = self.ctx
        command, args = ctx.argv()
        argv = serve_argv(command, args, ctx.env)
        if argv is None:
            raise self._fail(127, [f"exec: {' '.join(command)}: the sandbox's vLLM image runs only `vllm serve`"])
        # The same parser and snapshot preflight checked the campaign's command line with (capserve.core.vllm).
        version = image_version(ctx.image).version
        ctx.log.write(f"INFO [utils.py] vLLM API server version {version} (capserve sandbox stand-in)")
        try:
            self.args = parse_serve_args(argv, version)
        except VllmArgsError as error:
            raise self._fail(error.exit_code, error.lines) from None
        ctx.log.write(f"INFO [utils.py] non-default args: {_printable(self.args.non_default)}")
        if self.args.headless:
            self._serving = asyncio.ensure_future(self._join_leader())
            return
        try:
            host_model = check_model_dir(self.args.model, ctx.mounts)
        except ContainerExit as exc:
            raise self._fail(exc.code, exc.lines) from None
        # The container runs from here on; its server comes up in the background (and may never).
        self._serving = asyncio.ensure_future(self._serve_when_ready(host_model))

    async def _serve_when_ready(self, host_model: Path) -> None:
        ctx = self.ctx
        assert self.args is not None  # noqa: S101 - narrows the type for mypy
        expected, _ = remote_ranks(self.args)
        if expected:
            # vLLM's front end listens only once every engine, remote ones included, is ready.
            group = self._group = ctx.kubelet.vllm_group_open(ctx.namespace, ctx.pod_name, self.args, expected)
            ctx.log.write(f"INFO [core_client.py] Waiting for {expected} remote engine node(s) to connect")
            while len(group.joined) < expected:
                group.changed.clear()
                await group.changed.wait()
            ctx.log.write(f"INFO [core_client.py] All {expected} remote engine node(s) connected")
            for line in nccl_transport_lines(ctx):
                ctx.log.write(line)
        played = self._played_start(host_model, nodes=expected + 1)
        if played is not None:
            await played.play(self.args.model)
            leave_compiled(self._cache_root(), self._server_key(host_model))
        else:  # vLLM logs where its engine starts and when it listens, whatever it loads
            ctx.log.write(vllm_line(*engine_line(self.args.model), CLOCK.now()))
        slow = ctx.kubelet.faults.take(FaultKind.SLOW_START, ctx.pod_name, str(ctx.container.get("name")), ctx.image)
        delay = ctx.kubelet.timing.wall(slow.seconds) if slow else 0.0
        local = free_port()
        try:
            self.process = self._serve(ctx, self.args, host_model, local, delay)
            await self.process.start()
        finally:
            if played is not None:
                played.done()
        self.ports[self.args.port] = local
        if played is not None:
            played.listening(self.args.port)
        else:
            ctx.log.write(vllm_line(*listening_line(self.args.port), CLOCK.now()))

    def _played_start(self, host_model: Path, *, nodes: int) -> PlayedStart | None:
        """The modelled start of the checkpoint this one stands for, when the sandbox plays a block."""
        ctx, stands_for = self.ctx, self.ctx.kubelet.stands_for
        if stands_for is None or self.args is None:
            return None
        return played_start(
            stands_for,
            host_model=host_model,
            cache_root=self._cache_root(),
            server_key=self._server_key(host_model),
            instance_type=ctx.kubelet.instance_type(ctx.node),
            storage=weights_storage(ctx.pod, self.args.model),
            nodes=nodes,
            write=ctx.log.write,
            max_num_seqs=self.args.get("max_num_seqs"),
            autotune=self.args.get("enable_flashinfer_autotune") is not False,
        )

    def _cache_root(self) -> Path | None:
        """vLLM's cache root on the node (``VLLM_CACHE_ROOT`` mapped to the node's directory), if set."""
        root = self.ctx.env.get("VLLM_CACHE_ROOT")
        return Path(rewrite_paths(root, self.ctx.mounts)) if root else None

    def _server_key(self, host_model: Path) -> str:
        """What vLLM's compile cache is keyed by, as far as the stand-in tells servers apart (``server_key``)."""
        assert self.args is not None  # noqa: S101 - narrows the type for mypy
        return server_key(
            model=self.args.model, sizes=self.args.sizes(), vllm_version=image_version(self.ctx.image).version,
            host_model=host_model,
        )

    async def wait(self) -> Exit:
        if self._serving is not None:
            try:
                # Shielded: cancelling this wait must not cancel the container's own start-up.
                await asyncio.shield(self._serving)
            except ContainerExit as exit_:
                return Exit(exit_.code, exit_.reason or "Error", exit_.message)
            except SpawnError as error:  # the server's process could not be made: the container ends
                ended = start_error(error)
                return Exit(ended.code, ended.reason or START_ERROR, ended.message)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._serving.cancelled() and not (task and task.cancelling()):
                    return Exit(143, "Error")  # stopped before it served
                raise
        return await super().wait()

    async def _join_leader(self) -> None:
        ctx = self.ctx
        assert self.args is not None  # noqa: S101 - narrows the type for mypy
        rank, address = worker_rank(self.args)
        if address and not address.replace(".", "").isdigit():
            # The leader's name goes to CoreDNS first (kube/network.py): no server answering is EAI_AGAIN.
            answer = ctx.kubelet.pod_resolve(str(ctx.pod["metadata"]["uid"]), address)
            if answer.timed_out:
                raise self._fail(1, [f"socket.gaierror: [Errno -3] Temporary failure in name resolution ({address})"])
        leader = ctx.kubelet.resolve(ctx.namespace, address or "127.0.0.1")
        if leader is None:
            raise self._fail(1, [f"socket.gaierror: [Errno -2] Name or service not known ({address})"])
        group = ctx.kubelet.vllm_group(leader)
        while group is None:
            await asyncio.sleep(0.1)  # the rank retries until its leader's store answers
            group = ctx.kubelet.vllm_group(leader)
        mine, theirs = self.args.sizes(), group.leader.sizes()
        if mine != theirs:
            different = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
            raise self._fail(1, [f"RuntimeError: this rank's parallel layout differs from its leader's: {different}"])
        if not 1 <= rank <= group.expected:
            raise self._fail(1, [f"ValueError: rank {rank} is out of range for {group.expected + 1} node(s)"])
        if rank in group.joined and group.joined[rank] != ctx.pod["metadata"]["uid"]:
            raise self._fail(1, [f"RuntimeError: another process already joined as rank {rank}"])
        group.joined[rank] = str(ctx.pod["metadata"]["uid"])
        group.changed.set()
        ctx.log.write(f"INFO [core.py] Headless rank {rank} joined {address}; no API server on this node")

    async def stop(self, grace_s: float) -> None:
        self._leave()
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()
        await super().stop(grace_s)

    def kill_now(self) -> None:
        self._leave()
        if self._serving is not None and not self._serving.done():
            self._serving.cancel()
        super().kill_now()

    def _leave(self) -> None:
        if self.args is not None and not self.args.headless:
            if self._group is not None:
                self.ctx.kubelet.vllm_group_close(self.ctx.namespace, self.ctx.pod_name, self._group)
        elif self.args is not None:
            self.ctx.kubelet.vllm_leave(str(self.ctx.pod["metadata"]["uid"]))


def nccl_transport_lines(ctx: ContainerContext) -> list[str]:
    """What NCCL logs about its network once the ranks on several nodes set up their communicator.

    Only with ``NCCL_DEBUG=INFO`` (NCCL prints INFO lines at that level only), in NCCL's format
    ``<host>:<pid>:<tid> [<dev>] NCCL INFO <message>`` (src/debug.cc). Whether the image carries aws-ofi-nccl
    and libfabric is read from its files as the sandbox's registry lists them, by capserve's own rule
    (``capserve.core.rollout.efa_image``); the ``no-efa-plugin`` fault hides a plugin the image has (one not on
    the loader's path). With the stack, EFA devices allocated to the container and ``FI_PROVIDER=efa`` the plugin
    selects libfabric's efa provider (aws-ofi-nccl "Selected Provider is %s (found %d nics)", plugin name
    "Libfabric"); otherwise NCCL falls back to its socket transport ("NET/Socket : Using ...", "Using network
    Socket": src/transport/net_socket.cc, src/init.cc).
    """
    if ctx.env.get("NCCL_DEBUG", "").upper() != "INFO":
        return []
    prefix = f"{ctx.pod_name}:{os.getpid()}:{os.getpid()} [0] NCCL INFO"
    limits = (ctx.container.get("resources") or {}).get("limits") or {}
    efa_devices = int(str(limits.get("vpc.amazonaws.com/efa", "0")) or 0)
    container = str(ctx.container.get("name"))
    stack = efa_stack_problem(ctx.image, efa_stack_found(image_files(ctx.image))) is None
    plugin = stack and ctx.kubelet.faults.peek(FaultKind.NO_EFA_PLUGIN, ctx.pod_name, container, ctx.image) is None
    if efa_devices > 0 and ctx.env.get("FI_PROVIDER") == "efa" and plugin:
        return [
            f"{prefix} NET/OFI Selected Provider is efa (found {efa_devices} nics)",
            f"{prefix} Using network Libfabric",
        ]
    return [f"{prefix} NET/Socket : Using [0]eth0:{ctx.pod_ip}<0>", f"{prefix} Using network Socket"]


def _printable(values: Mapping[str, Any]) -> str:
    hidden = {"api_key", "hf_token"}
    return repr({k: ("<hidden>" if k in hidden else v) for k, v in sorted(values.items())})


def sandbox_server(ctx: ContainerContext, args: ServeArgs, host_model: Path, port: int, delay_s: float) -> LocalProcess:
    """The sandbox OpenAI server standing in for vLLM: the pod's served name, key and context length."""
    config: dict[str, Any] = {"model": args.served_model_names[0]}
    quality = quality_of_checkpoint(host_model)  # a deliberately bad revision answers badly
    if quality is not None:
        config["quality_accuracy"] = quality
    max_len = args.get("max_model_len")
    if isinstance(max_len, int) and max_len > 0:
        config["max_model_len"] = max_len
    # Started without --enable-auto-tool-choice and a parser: vLLM refuses tool_choice "auto".
    refusal = tool_choice_auto_refusal(args.values, args.version)
    if refusal is not None:
        config["tool_choice_auto_refusal"] = refusal
    parser = args.get("reasoning_parser")
    if isinstance(parser, str) and parser:
        # Served with --reasoning-parser, the stand-in thinks first and streams it as vLLM does.
        config["reasoning_parser"] = parser
    env = {**os.environ, **ctx.env}
    env.pop("VLLM_API_KEY", None)
    if args.api_keys:
        env["VLLM_API_KEY"] = args.api_keys[0]
    elif ctx.env.get("VLLM_API_KEY"):
        env["VLLM_API_KEY"] = ctx.env["VLLM_API_KEY"]
    argv = [
        sys.executable,
        "-m",
        "capserve_sandbox.openai_server",
        "--port",
        str(port),
        "--config-json",
        json.dumps(config),
        "--listen-after-s",
        f"{delay_s:.3f}",
    ]
    return LocalProcess(argv, env, ctx.scratch, ctx.log, ctx.kubelet.processes)


def real_vllm(venv: Path) -> ServeFn:
    """The real vLLM from ``venv`` with the pod's arguments (model and other paths mapped to the host)."""

    def start(ctx: ContainerContext, args: ServeArgs, host_model: Path, port: int, delay_s: float) -> LocalProcess:
        command, container_args = ctx.argv()
        argv = serve_argv(command, container_args, ctx.env) or []
        mapped: list[str] = ["--model", str(host_model)]
        skip = False
        for index, word in enumerate(argv):
            if skip:
                skip = False
                continue
            if word in ("--port", "--host", "--model"):
                skip = True
                continue
            if word.startswith(("--port=", "--host=", "--model=")) or (index == 0 and not word.startswith("-")):
                continue
            mapped.append(rewrite_paths(word, ctx.mounts))
        # CPU override (docs/sandbox-kubelet.md): container paths in the pod's environment (the compile
        # caches under /cache) are mapped to the node's directory like the arguments, and the pod IP is
        # not this machine's, so vLLM must not advertise it as its host address.
        pod_env = {key: rewrite_paths(value, ctx.mounts) for key, value in ctx.env.items() if key != "VLLM_HOST_IP"}
        env = {
            **os.environ,
            **pod_env,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        python = str(venv / "bin" / "python")
        serve = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            *mapped,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        if delay_s > 0:
            serve = ["sh", "-c", f'sleep {delay_s:.3f} && exec "$@"', "slow-start", *serve]
        return LocalProcess(serve, env, ctx.scratch, ctx.log, ctx.kubelet.processes)

    return start
