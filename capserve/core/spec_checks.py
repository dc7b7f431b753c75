"""Checks of a spec's values against what they will meet, so nothing is bought on a value that cannot work.

Pure: each function returns the problems it finds (empty when there are none), worded for a person who
must change the spec; ``capserve.core.spec`` calls them from its validators. None of them repeats a value
that may be secret.

Sources (docs/input.md, "Checked before anything is bought"):
- image references: the grammar of the distribution project's ``reference`` package
  (github.com/distribution/reference, ``reference.go`` and ``regexp.go``), which containerd and the kubelet
  parse with, and its ``normalize.go``: a first component with an upper-case letter is taken as a registry host;
- Capacity Block windows: EC2 user guide, "Capacity Blocks for ML" (a block starts at most 8 weeks ahead
  and ends at 11:30 UTC; offerings that start at a later day start at 11:30 UTC too, docs/aws-capacity.md §1);
- names: Unicode general categories (UAX #44, https://www.unicode.org/reports/tr44/#General_Category_Values) and
  the bidi controls of UAX #9 (https://www.unicode.org/reports/tr9/), all in category Cf;
- S3 key prefixes: an empty, ``.`` or ``..`` segment is kept literally by S3 but normalised away by the
  AWS CLI and most HTTP clients (S3 user guide, "Naming Amazon S3 objects": "Object key names with dot
  segments"), so the staged files would not be where the nodes look.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
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
    registry = registry_host(reference)
    if registry is not None and registry != registry.lower():
        if not any(mark in registry for mark in ".:"):
            return (
                f"{registry!r} has upper-case letters, so it is read as a registry host, not a Docker Hub namespace; "
                f"write it lower-case ({registry.lower()}/…)"
            )
        return f"the registry host {registry!r} has upper-case letters; write it lower-case ({registry.lower()})"
    name = reference.split("@", 1)[0].rsplit(":", 1)[0] if "@" in reference or ":" in reference else reference
    if len(name) > MAX_IMAGE_NAME:
        return f"the image's name is longer than {MAX_IMAGE_NAME} characters"
    return None


def registry_host(reference: str) -> str | None:
    """The registry host a puller contacts for ``reference``, or None for Docker Hub (distribution/reference
    ``normalize.go``, ``splitDockerDomain``): the first component is a host when it has a '.' or ':', is
    'localhost', or has an upper-case letter, so "Vllm/vllm-openai" is pulled from a host called "Vllm"."""
    first, slash, _ = reference.partition("/")
    if not slash:
        return None
    if any(mark in first for mark in ".:") or first == "localhost" or first != first.lower():
        return first
    return None


# --- names ---------------------------------------------------------------------------------------------

# Control (Cc), format (Cf: zero-width and bidi controls such as U+202E), surrogate, private-use and unassigned
# characters (Unicode general categories, UAX #44): invisible or reordering in every log, UI and report that
# shows the name, and a request naming the model must spell them byte for byte. Bidi controls are UAX #9's.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def name_problem(name: str) -> str | None:
    """Why ``name`` (a served model name, a campaign's free-text name) cannot be used (None when it can)."""
    if not name.strip():
        return "is empty or only white space; give a name"
    odd = next((c for c in name if unicodedata.category(c) in _HIDDEN_CATEGORIES), None)
    if odd is not None:
        what = unicodedata.name(odd, "a control character")
        return (
            f"has the invisible character U+{ord(odd):04X} ({what}, Unicode category {unicodedata.category(odd)}): "
            "control, format and bidi characters are not allowed in a name; retype it"
        )
    if name != name.strip():
        return "starts or ends with white space; remove it"
    return None


# --- evaluation sizes ----------------------------------------------------------------------------------


def open_loop_time_problem(requests: int, rates: Sequence[float], timeout_s: float) -> str | None:
    """Why the open-loop runs cannot all be sent inside the evaluation's deadline (None when they can).

    An open-loop run sends ``requests`` requests at ``rate`` per second on a schedule the endpoint cannot speed
    up, so its arrivals alone take ``requests / rate`` seconds; the runs follow each other (docs/evaluation.md).
    A profile whose arrivals outlast ``evaluation.timeout_s`` is cut short every time: its verdict is invalid.
    """
    if not rates:
        return None
    per_request_s = sum(1 / rate for rate in rates)
    needed_s = requests * per_request_s
    if needed_s <= timeout_s:
        return None
    fits = math.floor(timeout_s / per_request_s)
    shown = ", ".join(f"{rate:g}" for rate in rates)
    return (
        f"evaluation.load.open_loop_requests {requests:,} at evaluation.load.request_rates [{shown}] req/s take "
        f"{needed_s:,.0f} s just to send, more than evaluation.timeout_s {timeout_s:g} s: the largest that fits is "
        f"{fits:,}" + ("" if fits else " (none: raise the rates or the timeout)")
        + "; lower it, raise the rates or raise evaluation.timeout_s"
    )


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


def catalog_id_problem(kind: str, name: str, known: Iterable[str], *, spelling: str = "") -> str | None:
    """Why ``name`` is not a catalog id of ``kind`` (None when it is), with the nearest id when one is close
    (difflib, case folded: ``KIMI-K3`` → ``kimi-k3``)."""
    names = sorted(known)
    if name in names:
        return None
    near = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown {kind} {name!r}: {hint}{spelling}known: {', '.join(names)}"


def instance_type_problem(name: str, known: Iterable[str]) -> str | None:
    """Why ``name`` is not an instance type the catalog knows (an ``ml.`` prefix is SageMaker's spelling)."""
    spelling = "instance types are written as EC2 spells them; "
    return catalog_id_problem("instance type", name.removeprefix("ml."), known, spelling=spelling)


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
