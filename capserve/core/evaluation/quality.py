"""Golden-set items, deterministic answer extraction, exact-match scoring and a Wilson confidence interval."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from capserve.core.bounded_read import read_bounded
from capserve.core.catalog.models import Thinking
from capserve.core.errors import SpecError
from capserve.core.evaluation.spec import QualitySpec

Extractor = Literal["answer_line", "last_number"]

SYSTEM_PROMPT = (
    "You are a careful assistant. Think briefly if needed, then end your reply with one final line "
    "of the form 'Answer: <answer>'."
)


class GoldenItem(BaseModel):
    """One line of a golden JSONL file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1, max_length=64, description="Stable identifier, unique within the file.")
    category: str = Field(min_length=1, max_length=32, description="e.g. arithmetic, instruction, extraction.")
    prompt: str = Field(min_length=1, max_length=8000, description="The user message.")
    answer: str = Field(min_length=1, max_length=200, description="The expected answer after extraction.")
    aliases: tuple[str, ...] = Field(default=(), description="Other accepted answers.")
    extract: Extractor = Field(default="answer_line", description="How the answer is taken out of the reply.")


def load_golden(lines: Iterable[str], source: str = "golden set") -> list[GoldenItem]:
    """Parse golden JSONL text; blank lines are skipped; a bad line names its number."""
    items: list[GoldenItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = GoldenItem.model_validate_json(line)
        except ValidationError as exc:
            raise SpecError(f"{source} line {number}: {exc.errors()[0]['msg']}") from exc
        if item.id in seen:
            raise SpecError(f"{source} line {number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise SpecError(f"{source} has no items")
    return items


def packaged_golden() -> list[GoldenItem]:
    """The golden set shipped with capserve (written for this project)."""
    text = resources.files("capserve.core.evaluation").joinpath("golden/golden.jsonl").read_text("utf-8")
    return load_golden(text.splitlines(), "packaged golden set")


_ANSWER_LINE = re.compile(r"answer\s*\**\s*[:：][\s*_]*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _clean_number(text: str) -> str:
    value = text.replace(",", "")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value


def extract_answer(reply: str, how: Extractor) -> str | None:
    """The last ``Answer:`` line of ``reply``, or its last number (not the first: docs/evaluation.md §6.1)."""
    if how == "answer_line":
        matches = [m.group(1) for line in reply.splitlines() if (m := _ANSWER_LINE.search(line))]
        return matches[-1].strip() if matches else None
    numbers = _NUMBER.findall(reply)
    return _clean_number(numbers[-1]) if numbers else None


def normalize(text: str) -> str:
    """Case-, space- and decoration-insensitive form used for exact match."""
    value = text.strip().strip("*_`\"'“”‘’ ").lower()
    value = re.sub(r"\s+", " ", value)
    return value.rstrip(".!。").strip()


def is_correct(item: GoldenItem, reply: str) -> tuple[bool, str | None]:
    """(exact match?, extracted answer). Number items also match 4 vs 4.0."""
    extracted = extract_answer(reply, item.extract)
    if extracted is None:
        return False, None
    accepted = {normalize(item.answer), *(normalize(a) for a in item.aliases)}
    candidate = normalize(extracted)
    if item.extract == "answer_line" and candidate not in accepted:
        # "Answer: 42 apples" for a numeric answer: compare its last number too.
        numbers = _NUMBER.findall(candidate)
        if numbers and _clean_number(numbers[-1]) in accepted:
            return True, extracted
    return candidate in accepted, extracted


def wilson_interval(correct: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (better than ±z·√(p(1−p)/n) at small n)."""
    if total <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # At p = 0 or 1 the bounds are exactly 0 or 1 analytically; avoid 1e-17 rounding noise.
    low = 0.0 if correct == 0 else max(0.0, centre - half)
    high = 1.0 if correct == total else min(1.0, centre + half)
    return low, high


def quality_messages(item: GoldenItem) -> list[dict[str, Any]]:
    """Chat messages for one golden item."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.prompt}]


def fit_max_tokens(requested: int, max_model_len: int | None) -> int:
    """``requested`` within the endpoint's context: vLLM answers 400 to a max_tokens above max_model_len
    (vllm/renderers/params.py ``TokenizeParams``) and itself trims what the prompt leaves below it
    (``get_max_tokens`` in vllm/entrypoints/serve/utils/api_utils.py)."""
    return requested if max_model_len is None else max(1, min(requested, max_model_len))


def model_context(models_answer: Any, model: str) -> int | None:
    """``max_model_len`` that a /v1/models answer reports for ``model`` (None when it does not say)."""
    data = models_answer.get("data") if isinstance(models_answer, dict) else None
    for entry in data if isinstance(data, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            value = entry.get("max_model_len")
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    return None


def quality_payload(
    model: str,
    item: GoldenItem,
    spec: QualitySpec,
    *,
    thinks: bool = False,
    thinking: Thinking | None = None,
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """The chat request for one golden item (docs/evaluation.md §6.4).

    A model that thinks (``thinks``: the catalog's ``thinking`` or the smoke stream's evidence) spends
    tokens on thinking before its answer, and vLLM counts them against ``max_tokens``: an answer budget
    alone would be cut off mid-thought and score as wrong. So it either gets room for both
    (``leave_room``: ``max_tokens + thinking_budget_tokens``) or is asked to answer without thinking
    (``off``: the catalog's chat-template switch). Only the answer (``message.content``) is scored. The
    budget stays within ``max_model_len`` (``fit_max_tokens``).
    """
    payload: dict[str, Any] = {
        "model": model,
        "messages": quality_messages(item),
        "max_tokens": spec.max_tokens,
        "temperature": 0.0,
        "seed": spec.seed,
    }
    thinks = thinks or thinking is not None
    if not thinks:
        return payload
    if spec.thinking == "off" and thinking is not None:
        payload.update(thinking_off_request(thinking))
    else:
        # leave_room; or "off" for a model seen thinking that the catalog does not know: no switch is
        # known for it, so it gets room instead (the quality result cannot be a wrong guess at a switch).
        payload["max_tokens"] = fit_max_tokens(spec.max_tokens + spec.thinking_budget_tokens, max_model_len)
    return payload


def thinking_off_request(thinking: Thinking) -> dict[str, Any]:
    """The request fields that turn the thinking off; a SpecError saying what to change when nothing can."""
    try:
        return thinking.off_request()
    except ValueError as exc:
        raise SpecError(f"quality.thinking is 'off' but {exc}: set quality.thinking to 'leave_room'") from None


# A golden set is a few thousand short items: far below this, which keeps a wrong path (a device, a
# multi-gigabyte dump) from being read into memory.
MAX_GOLDEN_BYTES = 16 * 2**20


def golden_from_file(path: str) -> list[GoldenItem]:
    """Load a user-supplied golden JSONL file (a regular file of at most ``MAX_GOLDEN_BYTES``)."""
    try:
        raw = read_bounded(Path(path), MAX_GOLDEN_BYTES, "golden file")
    except SpecError as exc:
        raise SpecError(f"cannot read {exc}") from None
    try:
        return load_golden(io.StringIO(raw.decode("utf-8")), path)
    except UnicodeDecodeError as exc:
        raise SpecError(f"golden file {path} is not UTF-8 (byte offset {exc.start}); save it as UTF-8") from None

