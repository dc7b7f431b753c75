"""Redaction: a run's secrets never reach a log line, a file, an artifact or the Prefect database.

A ``Redactor`` is built from the secrets a run knows (the endpoint API key, the Hub token,
credentials taken out of a URL, the AWS secret key) and replaces every occurrence of each in any
text, in the forms a secret takes on its way through HTTP and JSON:

- as is, URL-encoded (``%2B`` and ``+`` for a space), JSON-escaped and ``repr``-escaped;
- base64 (standard and URL-safe, padded or not), also when the secret sits inside a longer base64
  string such as a ``Basic`` header's ``user:password``: base64 encodes 3 bytes into 4 characters,
  so a secret starting at any byte offset appears as one of three "cores", computed here.

Besides the known secrets, a few shapes are redacted whatever their value, because they are
credentials by construction: the user-info of a URL (``https://user:pass@host``), the value of a
``Bearer``/``Basic`` authorization, and Hugging Face tokens (``hf_…``). And the values vLLM's argument parser
repeats when it refuses a command line (``redact_vllm_arguments``): its "unrecognized arguments: …" line
names every word it could not place, values included (``--hf_tokn hf_…``), and "invalid … value: '…'" quotes
the value; the rollout's diagnosis copies those lines from the pod's log. The flags stay, so the line still
says what to fix.

Pure: no I/O, no process state. The process-wide registry that logging uses lives in
``capserve.tasks.secrets``.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"

# Shorter values would redact ordinary words ("test", "key") all over a report; no real API key,
# token or password worth the name is this short.
MIN_SECRET_LENGTH = 6
# A base64 core shorter than this matches too much unrelated base64 text (checksums, image data).
_MIN_BASE64_CORE = 8

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"<>]+@")
_AUTH_VALUE = re.compile(r"\b(?P<kind>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE)
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
# argparse's words (Lib/argparse.py: "unrecognized arguments: %s", "invalid %(type)s value: %(value)r",
# "invalid choice: %(value)r"), as vLLM prints them (vllm/utils/argparse_utils.py FlexibleArgumentParser).
_UNRECOGNIZED = re.compile(r"(?P<head>unrecognized arguments: )(?P<words>.*)")
_QUOTED_VALUE = re.compile(r"(?P<head>\binvalid (?:[\w.<>' ]+ )?(?:value|choice): )(?P<value>'[^']*'|\"[^\"]*\")")


def redact_vllm_arguments(text: str) -> str:
    """``text`` with the values in vLLM's argument errors replaced by ``[redacted]``, the flag names kept."""

    def words(match: re.Match[str]) -> str:
        kept = [
            word.partition("=")[0] + ("=" + REDACTED if "=" in word else "") if word.startswith("-") else REDACTED
            for word in match["words"].split()
        ]
        return match["head"] + " ".join(kept)

    text = _UNRECOGNIZED.sub(words, text)
    return _QUOTED_VALUE.sub(lambda match: match["head"] + REDACTED, text)


def _base64_forms(raw: bytes) -> set[str]:
    """Every way ``raw`` shows up in base64 text: the whole encoding and the three offset cores."""
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        forms.update({whole, whole.rstrip("=")})
        for offset in range(3):
            text = encode(b"\0" * offset + raw).decode("ascii")
            # Character i carries bits [6i, 6i+6): keep only the characters made of the secret's bits.
            start = math.ceil(8 * offset / 6)
            end = (8 * (offset + len(raw))) // 6
            core = text[start:end]
            if len(core) >= _MIN_BASE64_CORE:
                forms.add(core)
    return forms


def secret_forms(secret: str) -> set[str]:
    """The textual forms of one secret that a redactor looks for."""
    if len(secret) < MIN_SECRET_LENGTH:
        return set()
    forms = {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret)[1:-1],
        repr(secret)[1:-1],
    }
    forms |= _base64_forms(secret.encode("utf-8"))
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class Redactor:
    """Replaces every known secret (in every form above) and every credential-shaped string."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = frozenset(s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH)
        forms: set[str] = set()
        for secret in self._secrets:
            forms |= secret_forms(secret)
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(forms, key=lambda form: (-len(form), form))
        self._known = re.compile("|".join(re.escape(form) for form in ordered)) if ordered else None

    @property
    def secrets(self) -> frozenset[str]:
        return self._secrets

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        if not text:
            return text
        if self._known is not None:
            text = self._known.sub(REDACTED, text)
        text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
        text = _AUTH_VALUE.sub(lambda m: f"{m.group('kind')} {REDACTED}", text)
        return redact_vllm_arguments(_HF_TOKEN.sub(REDACTED, text))

    def redact_data(self, value: Any) -> Any:
        """A copy of JSON-like data (dicts, lists, tuples, strings) with every string redacted."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self.redact_data(k): self.redact_data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.redact_data(v) for v in value)
        return value
