"""Reading a file a user names, bounded: only a regular file, and no more than a limit of bytes.

A spec, a golden set or a model's config.json is a small regular file. ``/dev/zero`` would be read until
memory runs out, and a FIFO would block the command forever on its open, so both are refused by their
type before anything is read; a regular file is read no further than one byte past the limit.
"""

from __future__ import annotations

import stat
from pathlib import Path

from capserve.core.errors import SpecError


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` (at most ``limit``); every refusal is a ``SpecError`` naming ``what`` and the path."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SpecError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise SpecError(f"{what} {path}: is a directory; give the file itself")
    if not stat.S_ISREG(mode):
        raise SpecError(f"{what} {path}: is not a regular file (a device, pipe or socket); give a file")
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise SpecError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise SpecError(f"{what} {path}: larger than {limit:,} bytes; is this the right file?")
    return data
