"""The whole sandbox: every far end the campaign talks to, started on loopback, torn down on exit.

Production code only sees configuration: environment variables and the endpoints in
``SandboxEndpoints``. Stand-ins: moto (AWS, extended where moto lacks an API) and a local
OpenAI-compatible server standing in for the endpoint the rollout stage will create.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from capserve.sandbox.aws import moto_sandbox
from capserve.sandbox.openai_server import SandboxConfig, serve


@dataclass(frozen=True)
class SandboxEndpoints:
    aws: str
    region: str
    inference: str
    inference_note: str


@contextmanager
def sandbox(*, served_model_name: str, region: str = "us-east-2") -> Iterator[SandboxEndpoints]:
    with ExitStack() as stack:
        aws = stack.enter_context(moto_sandbox(region))
        inference = stack.enter_context(serve(SandboxConfig(model=served_model_name)))
        yield SandboxEndpoints(
            aws=aws.endpoint_url,
            region=aws.region,
            inference=inference,
            inference_note=(
                "The endpoint evaluated here is the sandbox's local OpenAI-compatible server, standing in for "
                "the vLLM endpoint the rollout stage will create; its latencies are synthetic."
            ),
        )
