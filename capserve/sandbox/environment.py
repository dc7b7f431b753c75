"""The whole sandbox: every far end the campaign talks to, started on loopback, torn down on exit.

Production code only sees configuration: environment variables and the endpoints in
``SandboxEndpoints``. Stand-ins: moto (AWS, extended where moto lacks an API), a local Hub serving a
tiny K3-shaped checkpoint, and a local OpenAI-compatible server standing in for the endpoint the
rollout stage will create.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from capserve.sandbox.aws import moto_sandbox, patched_environ
from capserve.sandbox.hub import local_hub
from capserve.sandbox.openai_server import SandboxConfig, serve


@dataclass(frozen=True)
class SandboxEndpoints:
    aws: str
    region: str
    hub: str
    inference: str
    inference_note: str


@contextmanager
def sandbox(*, served_model_name: str, region: str = "us-east-2") -> Iterator[SandboxEndpoints]:
    with ExitStack() as stack:
        aws = stack.enter_context(moto_sandbox(region))
        hub = stack.enter_context(local_hub())
        # The local Hub serves plain files; the Xet protocol is for hf.co's storage only.
        stack.enter_context(patched_environ({"HF_HUB_DISABLE_XET": "1"}))
        inference = stack.enter_context(serve(SandboxConfig(model=served_model_name)))
        yield SandboxEndpoints(
            aws=aws.endpoint_url,
            region=aws.region,
            hub=hub,
            inference=inference,
            inference_note=(
                "The endpoint evaluated here is the sandbox's local OpenAI-compatible server, standing in for "
                "the vLLM endpoint the rollout stage will create; its latencies are synthetic."
            ),
        )
