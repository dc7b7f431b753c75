"""Checks of a spec's values against what they will meet, so nothing is bought on a value that cannot work.

Pure: each function returns the problems it finds (empty when there are none), worded for a person who
must change the spec; ``capserve.core.spec`` calls them from its validators. None of them repeats a value
that may be secret.

Sources (docs/input.md, "Checked before anything is bought"):
- image references: the grammar of the distribution project's ``reference`` package
  (github.com/distribution/reference, ``reference.go``), which containerd and the kubelet parse with;
- Capacity Block windows: EC2 user guide, "Capacity Blocks for ML" (a block starts at most 8 weeks ahead
  and ends at 11:30 UTC; offerings that start at a later day start at 11:30 UTC too, docs/aws-capacity.md §1);
- S3 key prefixes: an empty, ``.`` or ``..`` segment is kept literally by S3 but normalised away by the
  AWS CLI and most HTTP clients (S3 user guide, "Naming Amazon S3 objects": "Object key names with dot
  segments"), so the staged files would not be where the nodes look.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, time, timedelta
from typing import Any

# --- numbers -------------------------------------------------------------------------------------------


def non_finite_paths(data: Any, path: tuple[str | int, ...] = ()) -> list[str]:
    """Dotted paths of every NaN or infinity in a parsed document (YAML's ``.nan``, ``.inf``; JSON's NaN)."""
    if isinstance(data, float) and not math.isfinite(data):
        return [".".join(str(p) for p in path) or "(top level)"]
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in non_finite_paths(value, (*path, str(key)))]
    if isinstance(data, list | tuple):
        return [p for index, value in enumerate(data) for p in non_finite_paths(value, (*path, index))]
    return []


def non_finite_problems(data: Any) -> list[str]:
    return [f"{path}: NaN and infinity are not numbers a spec may hold; write a finite number"
            for path in non_finite_paths(data)]


# --- image references ----------------------------------------------------------------------------------

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?(?P<name>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::{_TAG})?(?:@{_DIGEST})?$"
)
MAX_IMAGE_NAME = 255  # reference.go: NameTotalLengthMax


def image_reference_problem(reference: str) -> str | None:
    """Why ``reference`` is not an image reference a kubelet can pull (None when it is)."""
    if IMAGE_REFERENCE.match(reference) is None:
        return (
            "not an image reference: write [registry[:port]/]repository[:tag][@sha256:digest] with a lower-case "
            "repository, e.g. vllm/vllm-openai:v0.32.0 or 123456789012.dkr.ecr.us-east-2.amazonaws.com/vllm@sha256:…"
        )
    name = reference.split("@", 1)[0].rsplit(":", 1)[0] if "@" in reference or ":" in reference else reference
    if len(name) > MAX_IMAGE_NAME:
        return f"the image's name is longer than {MAX_IMAGE_NAME} characters"
    return None


# --- S3 prefixes ---------------------------------------------------------------------------------------


def s3_prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` would not name the same keys for every client (None when it is fine; '' is the bucket root)."""
    if prefix == "":
        return None
    segments = prefix.split("/")
    if any(s in ("", ".", "..") for s in segments):
        return (
            "has an empty, '.' or '..' segment (a leading, trailing or doubled '/', or a dot segment): clients "
            "normalise those away, so the files would not be where the nodes look; write segments like "
            "capserve/weights"
        )
    return None


# --- instance types ------------------------------------------------------------------------------------


def instance_type_problem(name: str, known: Iterable[str]) -> str | None:
    """Why ``name`` is not an instance type the catalog knows, with the nearest spelling when there is one."""
    names = sorted(known)
    if name.removeprefix("ml.") in names:
        return None
    near = difflib.get_close_matches(name.lower().removeprefix("ml."), names, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown instance type {name!r}: {hint}instance types are written as EC2 spells them ({', '.join(names)})"


# --- reservation windows -------------------------------------------------------------------------------

BLOCK_TIME = time(11, 30)  # Capacity Blocks start and end at 11:30 UTC (docs/aws-capacity.md §1.1)
MAX_BLOCK_LEAD = timedelta(weeks=8)  # a Capacity Block starts at most 8 weeks ahead (same source)


def _next_block_time(instant: datetime) -> datetime:
    at = datetime.combine(instant.astimezone(UTC).date(), BLOCK_TIME, tzinfo=UTC)
    return at if at >= instant else at + timedelta(days=1)


def capacity_block_window_problems(
    earliest_start: datetime, latest_end: datetime, duration: timedelta, *, now: datetime
) -> list[str]:
    """Why no Capacity Block of ``duration`` can be bought in the window (empty when one can).

    Only what also holds for a campaign that already holds a block (a re-run adopts it, and must not be
    refused): a window that is over, one that starts beyond the 8 weeks AWS sells ahead, and a window in the
    future without an 11:30 UTC start that leaves room for the block. A window that has begun is left to
    AWS's offerings (a block may start at once, ending at an 11:30 UTC) and to the adoption of a held one.
    """
    window = f"{earliest_start.isoformat()} → {latest_end.isoformat()}"
    if latest_end <= now:
        return [f"the window {window} is over: move capacity.latest_end into the future (e.g. 'now+14d')"]
    if earliest_start > now + MAX_BLOCK_LEAD:
        return [
            f"capacity.earliest_start {earliest_start.isoformat()} is more than 8 weeks ahead, and a Capacity Block "
            "starts at most 8 weeks ahead: search closer to the date (a schedule can start the campaign later)"
        ]
    if earliest_start > now:
        end = _next_block_time(earliest_start) + duration
        if end > latest_end:
            return [
                f"no Capacity Block of {duration.total_seconds() / 3600:.0f} h fits the window {window}: blocks "
                f"start and end at 11:30 UTC, so the earliest would end {end.isoformat()}; move "
                "capacity.latest_end to at least that"
            ]
    return []
