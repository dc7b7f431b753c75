"""Endpoint URLs given on the command line: checked before anything runs, credentials taken out.

A URL's user-info (``https://user:password@host``) is a credential. Prefect stores flow-run
parameters verbatim in its database, so a URL never travels as a parameter with its credentials:
the CLI splits them off here, hands them to the run through the environment (as it does the API
key) and passes only the public part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from capserve.core.errors import SpecError
from capserve.core.redaction import Redactor

MAX_URL_LENGTH = 2048
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(\[[0-9A-Fa-f:.]+\]|{_LABEL}(\.{_LABEL})*)$")


@dataclass(frozen=True)
class EndpointUrl:
    """A checked base URL: ``base`` is safe to log and store; the credentials are not."""

    base: str
    username: str | None = None
    password: SecretStr | None = None

    @property
    def has_credentials(self) -> bool:
        return self.username is not None or self.password is not None

    def basic_auth(self) -> str | None:
        """``user:password`` for HTTP Basic authentication, or None."""
        if not self.has_credentials:
            return None
        password = self.password.get_secret_value() if self.password is not None else ""
        return f"{self.username or ''}:{password}"


def parse_endpoint_url(value: str, *, what: str) -> EndpointUrl:
    """Check an OpenAI-compatible base URL; ``what`` names the option (e.g. ``--evaluate-url``).

    Allowed: ``http://`` or ``https://``, a host name or IP address, an optional port and path;
    optional ``user:password@`` (split off). Refused, each with a message saying what to write
    instead: no scheme, another scheme, no host, a bad port, a query or fragment (where keys
    hide), a path ending in ``/v1`` (the evaluation adds it).
    """
    shown = Redactor().redact(value.strip())[:200]
    text = value.strip()
    if not text:
        raise SpecError(f"{what}: empty; give the endpoint's base URL, e.g. http://127.0.0.1:8000")
    if len(text) > MAX_URL_LENGTH:
        raise SpecError(f"{what}: longer than {MAX_URL_LENGTH} characters")
    if any(c.isspace() for c in text):
        raise SpecError(f"{what}: {shown!r} contains white space; give one URL such as http://host:8000")
    if "://" not in text:
        raise SpecError(f"{what}: {shown!r} has no scheme; write http://{shown} or https://{shown}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise SpecError(f"{what}: {shown!r} is not a valid URL ({exc}); e.g. http://127.0.0.1:8000") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise SpecError(f"{what}: scheme {parts.scheme!r} is not supported; use http:// or https://")
    host = parts.hostname or ""
    if not host or not _HOST.match(host if ":" not in host else f"[{host}]"):
        raise SpecError(f"{what}: {shown!r} has no valid host name; e.g. http://127.0.0.1:8000")
    if port == 0:
        raise SpecError(f"{what}: port 0 is not a port you can connect to; give the endpoint's port (1–65535)")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise SpecError(
            f"{what}: a base URL takes no query or fragment ({shown!r}); "
            "pass an API key with --api-key-env instead of putting it in the URL"
        )
    path = parts.path.rstrip("/")
    if path.endswith("/v1") and what != _HUB:
        raise SpecError(f"{what}: give the base URL without /v1 (the evaluation adds /v1/...): {shown!r}")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    base = urlunsplit((parts.scheme.lower(), netloc, path, "", ""))
    username = unquote(parts.username) if parts.username is not None else None
    password = SecretStr(unquote(parts.password)) if parts.password is not None else None
    return EndpointUrl(base=base, username=username, password=password)


_HUB = "--hub-endpoint"


def parse_hub_endpoint(value: str) -> str:
    """A Hugging Face endpoint URL (``https://huggingface.co`` or a mirror): checked, without credentials."""
    url = parse_endpoint_url(value, what=_HUB)
    if url.has_credentials:
        raise SpecError(f"{_HUB}: give the URL without user:password; the Hub token goes in HF_TOKEN")
    return url.base


def public_url(url: str) -> str:
    """The URL without user-info, query or fragment (where credentials sometimes hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def has_hidden_parts(url: str) -> bool:
    """Whether ``url`` carries user-info, a query or a fragment (what ``public_url`` drops)."""
    parts = urlsplit(url)
    return bool(parts.username or parts.password or parts.query or parts.fragment)
