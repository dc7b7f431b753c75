"""How the evaluation authenticates to the endpoint: an API key or URL credentials, read from the environment.

Neither ever travels as a flow parameter (Prefect stores parameters verbatim): the flow gets the
*names* of environment variables. ``api_key_env`` holds a bearer key (``vllm serve --api-key``);
``basic_auth_env`` holds ``user:password`` that the CLI took out of a URL's user-info. An endpoint
takes one ``Authorization`` header, so at most one of them may be given.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass

from pydantic import SecretStr

from capserve.core.errors import SpecError
from capserve.tasks.secrets import register_secret

# Where the CLI puts the credentials it took out of an endpoint URL.
BASIC_AUTH_ENV = "CAPSERVE_ENDPOINT_BASIC_AUTH"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class EndpointAuth:
    """The Authorization header for the endpoint, or none."""

    api_key: SecretStr | None = None
    basic: tuple[str, SecretStr] | None = None

    def authorization(self) -> str | None:
        """The header value: ``Bearer <key>`` or ``Basic <base64(user:password)>``."""
        if self.api_key is not None:
            return f"Bearer {self.api_key.get_secret_value()}"
        if self.basic is not None:
            user, password = self.basic
            pair = f"{user}:{password.get_secret_value()}".encode()
            return f"Basic {base64.b64encode(pair).decode('ascii')}"
        return None

    def headers(self) -> dict[str, str]:
        value = self.authorization()
        return {"Authorization": value} if value else {}

    def secrets(self) -> list[str]:
        """Every value a redactor must hide for this endpoint."""
        found: list[str] = []
        if self.api_key is not None:
            found.append(self.api_key.get_secret_value())
        if self.basic is not None:
            user, password = self.basic
            found += [password.get_secret_value(), f"{user}:{password.get_secret_value()}"]
        return found


def check_env_name(name: str, option: str) -> None:
    """Refuse what cannot be an environment variable name (a value pasted instead of a name, say)."""
    if not _ENV_NAME.match(name):
        raise SpecError(
            f"{option}: {name[:3]}… is not an environment variable name (letters, digits and _, not starting "
            "with a digit); give the NAME of the variable that holds the secret, not the secret"
        )


def read_env_secret(name: str, option: str) -> SecretStr:
    """The value of the variable ``name``; a clear error when it is unset or empty."""
    check_env_name(name, option)
    value = os.environ.get(name)
    if not value:
        raise SpecError(
            f"{option}: environment variable {name} is not set or is empty; export {name}=<the key> "
            f"before running, or drop {option}"
        )
    return SecretStr(value)


def read_auth(api_key_env: str | None, basic_auth_env: str | None = None) -> EndpointAuth:
    """Read the endpoint's credentials from the named variables, and register them for redaction."""
    if api_key_env and basic_auth_env:
        raise SpecError(
            "the endpoint URL carries user:password and --api-key-env names a key: an endpoint takes one "
            "Authorization header; give one of them"
        )
    auth = EndpointAuth()
    if api_key_env:
        auth = EndpointAuth(api_key=read_env_secret(api_key_env, "--api-key-env"))
    elif basic_auth_env:
        user, _, password = read_env_secret(basic_auth_env, "endpoint URL credentials").get_secret_value().partition(
            ":"
        )
        auth = EndpointAuth(basic=(user, SecretStr(password)))
    register_secret(*auth.secrets())
    return auth
