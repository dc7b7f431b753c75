"""The Hugging Face Hub connection as a Prefect Block: endpoint + token (a SecretStr, never logged)."""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

HUB_ENDPOINT = "https://huggingface.co"


class HubCredentials(Block):
    """Where the Hub is and how to authenticate (gated repos need a token with read access)."""

    _block_type_name = "capserve Hub credentials"
    _description = "Hugging Face Hub endpoint and read token for capserve's weights stage."

    endpoint: str = Field(
        HUB_ENDPOINT, min_length=8, max_length=500, pattern=r"^https?://",
        description="Hub base URL; the sandbox's local Hub in tests and the demo.",
    )
    token: SecretStr | None = Field(
        None, description="Hub access token (read scope). None for public repos.",
    )
