"""``getent hosts`` and ``curl`` for the sandbox's tool containers, answered from the network model.

A tool container's shell script runs for real on this machine, but its network is the VPC the
sandbox models (``network.py``), not this machine's: a lookup goes to CoreDNS as the pod would, and a
connection opens only where routes and security groups let it. What each prints on failure is what
the real tool prints (glibc ``getent``: nothing, exit 2; curl 7/8: ``curl: (6) Could not resolve
host: ...`` and ``curl: (28) Connection timed out after ... milliseconds``). A connection that
would open gets an answer shaped like the server's (the API server's anonymous 403 Status, S3's
403 AccessDenied, or an empty 200 elsewhere): the model proves paths, it fetches nothing.

Only the options capserve's scripts use are accepted; anything else is refused loudly (exit 2),
so a script that starts relying on more fails in the sandbox first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, TextIO
from urllib.parse import urlsplit

from capserve_sandbox.kube.network import API_SERVER_NAMES, Answer

POD_ENV = "CAPSERVE_SANDBOX_POD"  # the pod's uid, set by the kubelet on tool containers
# The container process's party on a played block's clock (kubelet/process_hold.py); the shims pass it on, as
# every variable named CAPSERVE_SANDBOX_POD*.
PARTY_ENV = "CAPSERVE_SANDBOX_POD_PARTY"


class PodNet(Protocol):
    def pod_resolve(self, uid: str | None, name: str) -> Answer: ...

    def pod_connect(self, uid: str | None, name: str, port: int) -> str | None: ...


def getent(argv: list[str], net: PodNet, uid: str | None, out: TextIO, err: TextIO) -> int:
    if len(argv) < 2 or argv[0] != "hosts":
        print(f"getent: the capserve sandbox answers only `getent hosts NAME...`; got `getent {' '.join(argv)}`",
              file=err)
        return 1
    code = 0
    for name in argv[1:]:
        answer = net.pod_resolve(uid, name)
        if answer.address is None:
            code = 2  # glibc getent: "One or more supplied key could not be found", silently
            continue
        print(f"{answer.address:<15} {name}", file=out)
    return code


_FLAGS = {"-s", "--silent", "-S", "--show-error", "-k", "--insecure", "-sS", "-Ss", "-f", "--fail", "-fsS", "-sSf"}
_VALUED = {"-o", "--output", "--connect-timeout", "-m", "--max-time", "-w", "--write-out"}


def _body(host: str) -> tuple[int, str]:
    if host.rstrip(".") in API_SERVER_NAMES:
        return 403, json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": 'forbidden: User "system:anonymous" cannot get path "/"',
                "reason": "Forbidden",
                "details": {},
                "code": 403,
            }
        )
    if ".s3." in f".{host}" and host.endswith(".amazonaws.com"):
        return 403, '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>' \
                    "<Message>Access Denied</Message></Error>"
    return 200, ""


def curl(argv: list[str], net: PodNet, uid: str | None, out: TextIO, err: TextIO, cwd: Path) -> int:
    flags: set[str] = set()
    values: dict[str, str] = {}
    urls: list[str] = []
    words = iter(argv)
    for word in words:
        if word in _VALUED:
            values[word] = next(words, "")
        elif word in _FLAGS:
            flags.update({word} if word.startswith("--") else {f"-{c}" for c in word[1:]})
        elif word.startswith("-"):
            print(f"curl: option {word}: the capserve sandbox's curl does not take it", file=err)
            return 2
        else:
            urls.append(word)
    if len(urls) != 1:
        print("curl: the capserve sandbox's curl fetches exactly one URL", file=err)
        return 2
    silent = bool(flags & {"-s", "--silent"})
    show = not silent or bool(flags & {"-S", "--show-error"})
    parts = urlsplit(urls[0])
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    answer = net.pod_resolve(uid, host)
    if answer.address is None:
        if show:
            print(f"curl: (6) Could not resolve host: {host}", file=err)
        return 6
    blocked = net.pod_connect(uid, host, port)
    if blocked:
        seconds = float(values.get("--connect-timeout") or values.get("-m") or values.get("--max-time") or 300)
        if show:
            print(f"curl: (28) Connection timed out after {int(seconds * 1000) + 1} milliseconds", file=err)
        return 28
    status, body = _body(host)
    if flags & {"-f", "--fail"} and status >= 400:
        if show:
            print(f"curl: (22) The requested URL returned error: {status}", file=err)
        return 22
    target = values.get("-o") or values.get("--output")
    if target and target != "/dev/null":
        path = Path(target) if Path(target).is_absolute() else cwd / target
        path.write_text(body, encoding="utf-8")
    elif not target:
        out.write(body)
    written = values.get("-w") or values.get("--write-out")
    if written:
        out.write(written.replace("%{http_code}", str(status)).replace("\\n", "\n"))
    return 0
