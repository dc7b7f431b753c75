"""An ``aws`` command for the sandbox's tool containers: exactly the ``aws s3`` subcommands capserve's scripts use.

    aws s3 cp   <src> <dst> [--recursive] [--only-show-errors] [--quiet] [--no-progress]
    aws s3 sync <src> <dst> [--only-show-errors] [--quiet] [--no-progress] [--exact-timestamps]
    aws s3 ls   s3://bucket[/prefix] [--recursive]

Each talks to the sandbox's S3 through boto3 (``AWS_ENDPOINT_URL`` and credentials come from the
environment the kubelet gives the container). Anything else is refused loudly with the AWS CLI's
usage exit code (252), so a script that starts using another command fails in the sandbox first.
Output and exit codes follow the AWS CLI v2 (``download: s3://... to ...``; a missing key is
``fatal error: An error occurred (404) when calling the HeadObject operation: Not Found``, exit 1).

On a node with an instance role (HyperPod: the instance group's ExecutionRole; the kubelet sets
``INSTANCE_ROLE_ENV``), every S3 call is first checked against that role's policies
(``iam_eval``) and refused as S3 refuses it: ``HeadObject`` → ``(403) ... Forbidden``, the others
``AccessDenied ... is not authorized to perform: s3:<Action> on resource: "<arn>" because no
identity-based policy allows the s3:<Action> action`` (IAM user guide, "Troubleshoot access denied
error messages"). Without one, calls go out with the sandbox's own credentials. Under moto's IAM enforcement
(``capserve_sandbox.aws.iam_enforced``) the kubelet gives the container the role's own temporary credentials
instead, and moto does the checking.

Starting Python and importing boto3 for every ``aws s3 cp`` of a staging script would take a second
each on a small box, so the kubelet serves the commands in-process (``ShimServer``, a Unix socket in
the sandbox's state directory) and the ``aws`` on the container's PATH is a tiny client
(``CLIENT``) that forwards argv, environment and working directory and replays the answer. The same
client stands in for ``getent`` and ``curl`` (``net_tools.py``).

A tool container's own Python (the staging copy, ``python3`` with boto3: ``capserve/tasks/weights/s3_copy_tool.py``)
talks to the sandbox's S3 itself, through botocore; the ``python3`` on its PATH loads ``SDK_HOOK`` first, which
asks this service before each S3 call (``sdk_call``: the same reachability and instance-role checks as the
commands below) and after each ``GetObject`` (``sdk_read``: the played time of the bytes it brought).

Each S3 call first goes where the pod's would: the bucket's regional name resolved through the
pod's DNS and a connection to it through the node's routes (``network.py``). Without that path the
command fails as the AWS CLI does when botocore cannot connect (``EndpointConnectionError``):
``fatal error: Could not connect to the endpoint URL: "https://<bucket>.s3.<region>.amazonaws.com/..."``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socketserver
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from capserve_sandbox.kube.net_tools import PARTY_ENV, POD_ENV, PodNet, curl, getent

USAGE_EXIT = 252
# Set by the kubelet on nodes whose instance has an IAM role (the AWS_ prefix: the client forwards AWS_* only).
INSTANCE_ROLE_ENV = "AWS_CAPSERVE_SANDBOX_INSTANCE_ROLE_ARN"
QUIET_FLAGS = {"--only-show-errors", "--quiet", "--no-progress"}
ACCEPTED_FLAGS = {
    "cp": QUIET_FLAGS | {"--recursive"},
    "sync": QUIET_FLAGS | {"--exact-timestamps"},
    "ls": {"--recursive"},
}


SHIM_COMMANDS = ("aws", "getent", "curl")


class _Io:
    """Where a command writes, where its relative paths start, and the network its pod sits on."""

    def __init__(
        self, out: TextIO, err: TextIO, cwd: Path, env: Mapping[str, str], net: PodNet | None = None
    ) -> None:
        self.out, self.err, self.cwd, self.env, self.net = out, err, cwd, env, net
        self._documents: list[dict[str, Any]] | None = None

    def unreachable(self, bucket: str, key: str = "") -> bool:
        """Print the AWS CLI's connection error and return True when the pod cannot reach the bucket."""
        if self.net is None:
            return False
        region = self.env.get("AWS_REGION") or self.env.get("AWS_DEFAULT_REGION") or "us-east-1"
        host = f"{bucket}.s3.{region}.amazonaws.com"
        uid = self.env.get(POD_ENV)
        if self.net.pod_resolve(uid, host).address is not None and self.net.pod_connect(uid, host, 443) is None:
            return False
        print(f'fatal error: Could not connect to the endpoint URL: "https://{host}/{key}"', file=self.err)
        return True

    def path(self, value: str) -> Path:
        path = Path(value)
        return path if path.is_absolute() else self.cwd / path

    def copied_from_s3(self, s3: Any, bucket: str, key: str, size: int) -> None:
        """Tell the node the copy landed on (a simulated block plays its modelled time: played_staging.py)."""
        played = getattr(self.net, "copied_from_s3", None)
        if played is None:
            return

        def list_sizes(bucket: str, prefix: str) -> dict[str, int]:
            found: dict[str, int] = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
                found.update({item["Key"]: int(item["Size"]) for item in page.get("Contents") or []})
            return found

        played(self.env.get(POD_ENV), bucket, key, size, list_sizes, party=self.env.get(PARTY_ENV))

    def authorize(self, action: str, bucket: str, key: str | None, operation: str) -> None:
        """Raise S3's ClientError when the node's instance role may not do ``action`` (no role: no check)."""
        role_arn = self.env.get(INSTANCE_ROLE_ENV)
        if not role_arn:
            return
        from botocore.exceptions import ClientError

        from capserve_sandbox.kube import iam_eval

        # arn:aws:iam::<account>:role/<path/><name>
        account, role_name = role_arn.split(":")[4], role_arn.rsplit("/", 1)[-1]
        if self._documents is None:
            self._documents = iam_eval.role_documents(_client(self.env, "iam"), role_name)
        resource = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else "")
        if iam_eval.allowed(self._documents, action, resource, account=account):
            return
        if operation == "HeadObject":  # HEAD has no body: only the status reaches the client
            raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, operation)
        who = f"arn:aws:sts::{account}:assumed-role/{role_name}/sandbox-instance"
        message = (
            f'User: {who} is not authorized to perform: {action} on resource: "{resource}" because no '
            f"identity-based policy allows the {action} action"
        )
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": message}}, operation)


def _refuse(argv: list[str], io_: _Io) -> int:
    print(
        f"aws: [ERROR]: the capserve sandbox's aws shim implements only `aws s3 cp|sync|ls` "
        f"(with {sorted(set().union(*ACCEPTED_FLAGS.values()))}); got `aws {' '.join(argv)}`",
        file=io_.err,
    )
    return USAGE_EXIT


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


_CLIENTS: dict[tuple[str, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(env: Mapping[str, str], service: str = "s3") -> Any:
    """A client for the container's AWS settings (one per service and distinct settings, reused)."""
    import boto3

    keys = (
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    )
    settings = (service, *(env.get(k, "") for k in keys))
    with _CLIENTS_LOCK:
        if settings not in _CLIENTS:
            session = boto3.session.Session(
                aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
                region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            )
            _CLIENTS[settings] = session.client(  # type: ignore[call-overload]
                service, endpoint_url=env.get("AWS_ENDPOINT_URL") or None
            )
        return _CLIENTS[settings]


def _keys(s3: Any, bucket: str, prefix: str, io_: _Io) -> list[dict[str, Any]]:
    io_.authorize("s3:ListBucket", bucket, None, "ListObjectsV2")
    found: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found += page.get("Contents") or []
    return found


def _download(s3: Any, bucket: str, key: str, target: Path, quiet: bool, io_: _Io) -> None:
    if target.is_dir() or str(target).endswith("/"):
        target = target / key.rsplit("/", 1)[-1]
    target.parent.mkdir(parents=True, exist_ok=True)
    io_.authorize("s3:GetObject", bucket, key, "GetObject")
    s3.download_file(bucket, key, str(target))
    io_.copied_from_s3(s3, bucket, key, target.stat().st_size)
    if not quiet:
        print(f"download: s3://{bucket}/{key} to {target}", file=io_.out)


def _upload(s3: Any, source: Path, bucket: str, key: str, quiet: bool, io_: _Io) -> None:
    if not key or key.endswith("/"):
        key = key + source.name
    io_.authorize("s3:PutObject", bucket, key, "PutObject")
    s3.upload_file(str(source), bucket, key)
    if not quiet:
        print(f"upload: {source} to s3://{bucket}/{key}", file=io_.out)


def cp(source: str, target: str, recursive: bool, quiet: bool, io_: _Io) -> int:
    s3 = _client(io_.env)
    if source.startswith("s3://") and not target.startswith("s3://"):
        bucket, key = _split(source)
        if recursive:
            prefix = key.rstrip("/") + "/" if key else ""
            for item in _keys(s3, bucket, prefix, io_):
                _download(s3, bucket, item["Key"], io_.path(target) / item["Key"][len(prefix) :], quiet, io_)
            return 0
        from botocore.exceptions import ClientError

        try:
            io_.authorize("s3:GetObject", bucket, key, "HeadObject")
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = {"404": "Not Found", "403": "Forbidden"}.get(code) or exc.response["Error"].get("Message", "")
            print(f"fatal error: An error occurred ({code}) when calling the HeadObject operation: {message}",
                  file=io_.err)
            return 1
        _download(s3, bucket, key, io_.path(target), quiet, io_)
        return 0
    if target.startswith("s3://") and not source.startswith("s3://"):
        bucket, key = _split(target)
        path = io_.path(source)
        if recursive:
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                _upload(s3, file, bucket, f"{key.rstrip('/')}/{file.relative_to(path)}".lstrip("/"), quiet, io_)
            return 0
        if not path.is_file():
            print(f"The user-provided path {source} does not exist.", file=io_.err)
            return 255
        _upload(s3, path, bucket, key, quiet, io_)
        return 0
    print("aws: [ERROR]: the sandbox shim copies between S3 and local files only", file=io_.err)
    return USAGE_EXIT


def sync(source: str, target: str, quiet: bool, io_: _Io) -> int:
    s3 = _client(io_.env)
    if source.startswith("s3://") and not target.startswith("s3://"):
        bucket, key = _split(source)
        prefix = key.rstrip("/") + "/" if key else ""
        for item in _keys(s3, bucket, prefix, io_):
            local = io_.path(target) / item["Key"][len(prefix) :]
            if not local.is_file() or local.stat().st_size != item["Size"]:
                _download(s3, bucket, item["Key"], local, quiet, io_)
        return 0
    if target.startswith("s3://") and not source.startswith("s3://"):
        bucket, key = _split(target)
        remote = {item["Key"]: item["Size"] for item in _keys(s3, bucket, key.rstrip("/") + "/" if key else "", io_)}
        root = io_.path(source)
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            destination = f"{key.rstrip('/')}/{file.relative_to(root)}".lstrip("/")
            if remote.get(destination) != file.stat().st_size:
                _upload(s3, file, bucket, destination, quiet, io_)
        return 0
    print("aws: [ERROR]: the sandbox shim syncs between S3 and local directories only", file=io_.err)
    return USAGE_EXIT


def ls(uri: str, recursive: bool, io_: _Io) -> int:
    s3 = _client(io_.env)
    bucket, key = _split(uri)
    items = _keys(s3, bucket, key, io_)
    if not recursive:
        seen = set()
        for item in items:
            rest = item["Key"][len(key) :]
            if "/" in rest:
                folder = rest.split("/", 1)[0] + "/"
                if folder not in seen:
                    seen.add(folder)
                    print(f"                           PRE {folder}", file=io_.out)
                continue
            print(f"{item['LastModified']:%Y-%m-%d %H:%M:%S} {item['Size']:>10} {rest}", file=io_.out)
    else:
        for item in items:
            print(f"{item['LastModified']:%Y-%m-%d %H:%M:%S} {item['Size']:>10} {item['Key']}", file=io_.out)
    return 0 if items else 1


# botocore's S3 operations the SDK hook checks, and the IAM action each needs (S3 API reference, "Actions").
SDK_ACTIONS = {"GetObject": "s3:GetObject", "HeadObject": "s3:GetObject", "ListObjectsV2": "s3:ListBucket"}


def sdk_call(argv: list[str], io_: _Io) -> int:
    """``<operation> <bucket> [<key>]``: may the pod make this S3 call? Prints the refusal as JSON for the hook."""
    operation, bucket, key = argv[0], argv[1], (argv[2] if len(argv) > 2 else None)
    if io_.unreachable(bucket, key or ""):
        region = io_.env.get("AWS_REGION") or io_.env.get("AWS_DEFAULT_REGION") or "us-east-1"
        print(json.dumps({"connect": f"https://{bucket}.s3.{region}.amazonaws.com/{key or ''}"}), file=io_.out)
        return 1
    from botocore.exceptions import ClientError

    try:
        io_.authorize(SDK_ACTIONS.get(operation, f"s3:{operation}"), bucket, key, operation)
    except ClientError as exc:
        print(json.dumps({"client": exc.response["Error"]}), file=io_.out)
        return 1
    return 0


def sdk_read(argv: list[str], io_: _Io) -> int:
    """``<bucket> <key> <bytes>``: a GetObject brought these bytes onto the pod's node (its played time)."""
    bucket, key, size = argv[0], argv[1], int(argv[2])
    io_.copied_from_s3(_client(io_.env), bucket, key, size)
    return 0


def run(argv: list[str], io_: _Io) -> int:
    """One ``aws`` command line; returns the CLI's exit code."""
    if len(argv) < 2 or argv[0] != "s3" or argv[1] not in ACCEPTED_FLAGS:
        return _refuse(argv, io_)
    command = argv[1]
    flags = {a for a in argv[2:] if a.startswith("--")}
    positional = [a for a in argv[2:] if not a.startswith("--")]
    if flags - ACCEPTED_FLAGS[command]:
        return _refuse(argv, io_)
    quiet = bool(flags & QUIET_FLAGS)
    remote = next((p for p in positional if p.startswith("s3://")), None)
    if remote is not None and io_.unreachable(*_split(remote)):
        return 1
    try:
        if command == "ls":
            if len(positional) != 1 or not positional[0].startswith("s3://"):
                return _refuse(argv, io_)
            return ls(positional[0], "--recursive" in flags, io_)
        if len(positional) != 2:
            return _refuse(argv, io_)
        if command == "cp":
            return cp(positional[0], positional[1], "--recursive" in flags, quiet, io_)
        return sync(positional[0], positional[1], quiet, io_)
    except Exception as exc:  # noqa: BLE001 - the CLI prints any failure and exits 1
        from botocore.exceptions import ClientError

        # The CLI prints a service error as botocore words it: "An error occurred (Code) when calling ...".
        print(f"fatal error: {exc if isinstance(exc, ClientError) else f'{type(exc).__name__}: {exc}'}", file=io_.err)
        return 1


# ---------------------------------------------------------------- in-process service and its client


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request = json.loads(self.rfile.readline())
        out, err = io.StringIO(), io.StringIO()
        net: PodNet | None = getattr(self.server, "capserve_net", None)
        command, *argv = list(request["argv"]) or ["aws"]
        env, cwd = dict(request["env"]), Path(request["cwd"])
        uid = env.get(POD_ENV)
        if command == "getent" and net is not None:
            code = getent(argv, net, uid, out, err)
        elif command == "curl" and net is not None:
            code = curl(argv, net, uid, out, err, cwd)
        elif command == "sdk-call":
            code = sdk_call(argv, _Io(out, err, cwd, env, net))
        elif command == "sdk-read":
            code = sdk_read(argv, _Io(out, err, cwd, env, net))
        else:
            code = run(argv, _Io(out, err, cwd, env, net))
        self.wfile.write(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}).encode() + b"\n")


class ShimServer:
    """Serves ``aws`` commands of tool containers on a Unix socket, from a thread of this process."""

    def __init__(self, socket_path: Path, net: PodNet | None = None) -> None:
        self.socket_path = socket_path
        socket_path.unlink(missing_ok=True)
        self._server = socketserver.ThreadingUnixStreamServer(str(socket_path), _Handler)
        self._server.daemon_threads = True
        self._server.capserve_net = net  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, name="aws-shim", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.socket_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.socket_path.parent.rmdir()


# The `aws` a tool container finds on its PATH: stdlib only, so it starts in milliseconds.
CLIENT = """import json, os, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(SOCKET)
env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "CAPSERVE_SANDBOX_POD"))}
request = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": env}
sock.sendall(json.dumps(request).encode() + b"\\n")
answer = json.loads(sock.makefile("rb").readline())
sys.stdout.write(answer["out"])
sys.stderr.write(answer["err"])
sys.exit(answer["code"])
"""


# Loaded first by a tool container's ``python3`` (its ``sitecustomize``): botocore asks the service above before
# each S3 call of the container and tells it after each GetObject. Registered as botocore built-in handlers, so
# every session and client the container makes carries them.
SDK_HOOK = """import json, os, socket


def _ask(argv):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(SOCKET)
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "CAPSERVE_SANDBOX_POD"))}
    sock.sendall(json.dumps({"argv": argv, "cwd": os.getcwd(), "env": env}).encode() + b"\\n")
    with sock, sock.makefile("rb") as answer:
        return json.loads(answer.readline())


def _before(params, model, context, **_):
    bucket, key = params.get("Bucket"), params.get("Key")
    context["capserve_sandbox_object"] = (bucket, key)
    answer = _ask(["sdk-call", model.name, bucket] + ([key] if key else []))
    if answer["code"] == 0:
        return
    from botocore.exceptions import ClientError, EndpointConnectionError

    refusal = json.loads(answer["out"])
    if "connect" in refusal:
        raise EndpointConnectionError(endpoint_url=refusal["connect"])
    status = 403 if refusal["client"].get("Code") in ("403", "AccessDenied") else 400
    raise ClientError({"Error": refusal["client"], "ResponseMetadata": {"HTTPStatusCode": status}}, model.name)


def _after(http_response, parsed, context, **_):
    bucket, key = context.get("capserve_sandbox_object") or (None, None)
    if bucket and key and http_response.status_code < 300:
        _ask(["sdk-read", bucket, key, str(parsed.get("ContentLength") or 0)])


try:
    from botocore import handlers
except ImportError:
    pass
else:
    for _operation in ("GetObject", "HeadObject", "ListObjectsV2"):
        handlers.BUILTIN_HANDLERS.append(("before-parameter-build.s3." + _operation, _before))
    handlers.BUILTIN_HANDLERS.append(("after-call.s3.GetObject", _after))
"""


def main(argv: list[str]) -> int:
    return run(argv, _Io(sys.stdout, sys.stderr, Path.cwd(), os.environ))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
