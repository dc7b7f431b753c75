"""The digest the campaign record and the rehearsal record key what they prove by."""

from __future__ import annotations

import hashlib
import json
from typing import Any

SHA256_HEX = r"^[0-9a-f]{64}$"


def digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value`` (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
