"""An in-process moto server on loopback, with the AWS SDK of this process pointed at it.

The production code builds its boto3 clients exactly as it would against AWS; only the environment
differs (``AWS_ENDPOINT_URL``, dummy credentials, a region). That keeps "switching to AWS is
configuration" true: no code path exists only for the sandbox.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from moto.core.authorization import enable_iam_authentication
from moto.server import ThreadedMotoServer

from capserve_sandbox.aws_ext import INSTALLERS
from capserve_sandbox.aws_ext.iam_rules import ISSUED
from capserve_sandbox.failures import ReportServerErrors

# Functions that patch moto before its server starts (operations moto lacks): sandbox/capserve_sandbox/aws_ext/.
MOTO_EXTENSIONS: tuple[Callable[[], None], ...] = INSTALLERS

SANDBOX_ENV = {
    # The secret parts are redacted wherever they appear (capserve.tasks.secrets): they must not be a
    # word the report legitimately contains, such as "sandbox" in the sandbox Hub's repository names.
    "AWS_ACCESS_KEY_ID": "sandbox",
    "AWS_SECRET_ACCESS_KEY": "sandbox-aws-secret-access-key",
    "AWS_SESSION_TOKEN": "sandbox-aws-session-token",
    # Never let botocore wander off to the instance metadata service looking for credentials.
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class AwsSandbox:
    endpoint_url: str
    region: str


@contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block, restoring what was there before."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextmanager
def moto_sandbox(region: str = "us-east-2") -> Iterator[AwsSandbox]:
    """Start moto on 127.0.0.1 (a free port), point boto3 at it, stop it and restore the env on exit."""
    for extend in MOTO_EXTENSIONS:
        extend()
    # moto's werkzeug server logs every request to stderr; the demo's output is for people. A request that
    # raised (a bug of moto's or of aws_ext's) is a failure of the stand-in: reported, not printed.
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.WARNING)
    reporting = ReportServerErrors("moto (AWS)")
    werkzeug.addFilter(reporting)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        # moto keeps its state in process-wide backends: a new server would see the last one's
        # clusters and VPCs. Every sandbox starts empty.
        _reset_moto(endpoint)
        env = {**SANDBOX_ENV, "AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": region, "AWS_REGION": region}
        with patched_environ(env):
            yield AwsSandbox(endpoint_url=endpoint, region=region)
    finally:
        server.stop()
        werkzeug.removeFilter(reporting)


def _reset_moto(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")  # noqa: S310 - loopback only
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback only
        response.read()



@contextmanager
def iam_enforced() -> Iterator[None]:
    """From here on, the sandbox's moto checks each request's signature against the IAM user or assumed role
    whose key signed it, and that principal's identity policies, as AWS would: the set-up an administrator
    does (users, policies, buckets) happens before, with the sandbox's own key, which then stops working.

    What moto 5.2.5 authorizes is narrower than AWS (docs/iam/README.md §5): every request is matched against
    its action, but the resource is ``*`` for most services and conditions other than ``StringEquals`` are
    ignored. The campaign's code does not know: this changes only the far end."""
    ISSUED.clear()
    with enable_iam_authentication():
        yield

