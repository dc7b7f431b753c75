"""Checks of command-line input that run before anything is started, bought or created.

Each raises ``SpecError`` with one message naming the option and what to write instead; the
commands turn it into exit code 2 (``BAD_INPUT``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from capserve.core.errors import SpecError
from capserve.core.evaluation.client_limits import load_refusals
from capserve.core.evaluation.spec import LoadSpec
from capserve.core.urls import parse_endpoint_url
from capserve.tasks.evaluation.auth import BASIC_AUTH_ENV, read_auth, read_env_secret
from capserve.tasks.evaluation.host import host_capacity
from capserve.tasks.secrets import register_secret


def endpoint_option(value: str, option: str) -> tuple[str, str | None]:
    """(public base URL, name of the variable now holding its credentials or None).

    Credentials in the URL are moved into ``CAPSERVE_ENDPOINT_BASIC_AUTH`` of this process (and so
    of the flow runs it starts), and registered for redaction; only the public URL goes on.
    """
    url = parse_endpoint_url(value, what=option)
    pair = url.basic_auth()
    if pair is None:
        return url.base, None
    register_secret(pair, url.password.get_secret_value() if url.password is not None else None)
    os.environ[BASIC_AUTH_ENV] = pair
    return url.base, BASIC_AUTH_ENV


def api_key_option(name: str | None, basic_auth_env: str | None) -> None:
    """Check ``--api-key-env`` now (set, not empty, not combined with URL credentials) and register the key."""
    if name is not None:
        read_env_secret(name, "--api-key-env")
    read_auth(name, basic_auth_env)


def writable_dir(path: Path, option: str) -> Path:
    """Make sure ``path`` is (or can be made) a folder we can write into: created now, probed with a file.

    A real write is the only honest test (permissions, read-only mounts, a file in the way, quotas);
    it runs last among the input checks, so a bad spec never leaves an empty folder behind.
    """
    if path.exists() and not path.is_dir():
        raise SpecError(f"{option}: {path} exists and is not a folder; give a folder for the report")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".capserve-write-probe-"):
            pass
    except OSError as exc:
        raise SpecError(
            f"{option}: cannot write to {path} ({exc.strerror or exc}); give a folder you can write to"
        ) from None
    return path


def load_option(load: LoadSpec, where: str) -> None:
    """Refuse a load profile this host's client cannot drive, before anything runs."""
    refused = load_refusals(load, host_capacity(load))
    if refused:
        lines = "\n".join(f"  {where} {name}: {why}" for name, why in refused.items())
        raise SpecError(f"load the client cannot drive (nothing was run):\n{lines}")


def prefect_api_url(command: str) -> str:
    """The Prefect server's API URL (``PREFECT_API_URL``, from the environment or the active Prefect profile) that
    ``command`` works on; refused when unset or without a scheme, naming the variable."""
    from prefect.settings import PREFECT_API_URL

    api = str(PREFECT_API_URL.value() or "")
    if not api:
        raise SpecError(
            "PREFECT_API_URL is not set: deployments and automations live on a Prefect server; set it to that "
            f"server's API (e.g. http://127.0.0.1:4200/api) and run `{command}` again"
        )
    if not api.startswith(("http://", "https://")):
        raise SpecError(f"PREFECT_API_URL {api!r} has no http:// or https:// scheme: write it as http://HOST:PORT/api")
    return api
