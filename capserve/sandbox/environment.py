"""The whole sandbox: every far end the campaign talks to, started on loopback, torn down on exit.

Later stages add their stand-ins here (the local Hub, the fake Kubernetes API, the local
OpenAI-compatible server). Production code only sees configuration: environment variables and the
endpoints in ``SandboxEndpoints``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from capserve.sandbox.aws import moto_sandbox


@dataclass(frozen=True)
class SandboxEndpoints:
    aws: str
    region: str


@contextmanager
def sandbox(region: str = "us-east-2") -> Iterator[SandboxEndpoints]:
    with ExitStack() as stack:
        aws = stack.enter_context(moto_sandbox(region))
        yield SandboxEndpoints(aws=aws.endpoint_url, region=aws.region)
