"""Strictness across the whole campaign spec, checked field by field so a new section cannot forget it.

Every number and boolean field refuses values of another kind (``true`` is not a count, ``"8"`` is not
a number, ``1`` is not a boolean), every text field is bounded, every field is described; and errors
name the line, the path, what was given and what is allowed.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from capserve.core.errors import SpecError
from capserve.core.spec import CampaignSpec, _schema_at, load_spec, parse_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GOOD: dict[str, Any] = {
    "name": "k3-demo",
    "model": {"catalog": "kimi-k3"},
    "capacity": {
        "provider": "ec2-capacity-block",
        "instance_type": "p6-b300.48xlarge",
        "instance_count": 1,
        "regions": ["us-east-2"],
        "earliest_start": "now",
        "latest_end": "now+14d",
        "duration_hours": 48,
        "max_upfront_fee_usd": 20000,
        "approval_threshold_usd": 15000,
    },
    "weights": {"s3_bucket": "capserve-weights"},
}
Leaf = tuple[tuple[str, ...], str, bool]  # (path, "int" | "float" | "bool" | "str" | other, is a list)


def _kind(annotation: Any) -> tuple[str, Any, bool]:
    """(kind, model class or None, is a list) of a field annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kind(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind(inner[0]) if len(inner) == 1 else ("union", None, False)
    if origin in (list, tuple):
        kind, model, _ = _kind(typing.get_args(annotation)[0])
        return kind, model, True
    if origin is typing.Literal:
        return "literal", None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation, False
    if annotation in (bool, int, float, str):
        return annotation.__name__, None, False
    return getattr(annotation, "__name__", str(annotation)), None, False


def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[Leaf]:
    for name, field in model.model_fields.items():
        kind, inner, is_list = _kind(field.annotation)
        if kind == "model" and not is_list:
            yield from leaves(inner, (*prefix, name))
        else:
            yield (*prefix, name), kind, is_list


def with_value(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return data


ALL = list(leaves(CampaignSpec))
WRONG = {"int": [True, "8", 1.5], "float": [True, "1.5"], "bool": [1, "yes"]}
EXPECTED = {"int": "valid integer", "float": "valid number", "bool": "valid boolean"}
NUMERIC = [(path, kind, is_list, bad) for path, kind, is_list in ALL if kind in WRONG for bad in WRONG[kind]]


def test_the_walk_sees_every_section() -> None:
    paths = {".".join(path) for path, _, _ in ALL}
    assert {"capacity.instance_count", "evaluation.load.concurrency_levels", "evaluation.load.output.tokens"} <= paths
    assert {"evaluation.gates.smoke_must_pass", "teardown.drain_before_end_minutes"} <= paths
    assert len(NUMERIC) > 80


@pytest.mark.parametrize(("path", "kind", "is_list", "bad"), NUMERIC, ids=lambda v: str(v))
def test_numbers_and_booleans_are_never_coerced(path: tuple[str, ...], kind: str, is_list: bool, bad: Any) -> None:
    dotted = ".".join(path)
    with pytest.raises(SpecError) as caught:
        parse_spec(with_value(path, [bad] if is_list else bad), now=NOW)
    message = str(caught.value)
    where = f"{dotted}.0:" if is_list else f"{dotted}:"
    assert where in message and EXPECTED[kind] in message, message


def test_every_text_field_is_bounded_and_every_field_described() -> None:
    schema = CampaignSpec.model_json_schema()
    unbounded, undescribed = [], []
    for path, kind, is_list in ALL:
        node = _schema_at(schema, path) or {}
        if not node.get("description"):
            undescribed.append(".".join(path))
        if kind == "str":
            target = node.get("items", node) if is_list else node
            if not ({"maxLength", "pattern", "enum"} & set(target)):
                unbounded.append(".".join(path))
    assert unbounded == [] and undescribed == []


def test_whole_numbers_are_fine_where_a_decimal_is_meant() -> None:
    spec = parse_spec(with_value(("evaluation", "gates", "p95_ttft_ms"), 2500), now=NOW)
    assert spec.evaluation.gates.p95_ttft_ms == 2500.0


def test_times_stay_flexible() -> None:
    for value in ("now+2d", "2026-12-01T11:30:00Z", "2026-12-01T11:30:00+02:00", datetime(2026, 12, 1, tzinfo=UTC)):
        parse_spec(with_value(("capacity", "earliest_start"), value), now=NOW)


def test_errors_give_line_path_what_was_given_and_what_is_allowed(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: k3-demo\n"
        "model: {catalog: kimi-k3}\n"
        "capacity:\n"
        "  provider: ec2-capacity-block\n"
        "  instance_type: p6-b300.48xlarge\n"
        "  instance_count: true\n"
        "  regions: [us-east-2]\n"
        "  earliest_start: now\n"
        "  latest_end: now+14d\n"
        "  duration_hours: 48\n"
        "  max_upfront_fee_usd: 20000\n"
        "cluster: [eks]\n"
        "cluster_typo: 1\n"
        "weights: {s3_bucket: capserve-weights}\n"
        "serving: {extra_args: [--tensor-parallel-size, 8]}\n"
    )
    with pytest.raises(SpecError) as caught:
        load_spec(spec, now=NOW)
    message = str(caught.value)
    assert (
        "line 6: capacity.instance_count: Input should be a valid integer (got true, a boolean). "
        "Allowed: a whole number from 1 to 64" in message
    )
    assert "line 12: cluster: Input should be a mapping of fields" in message and "kubernetes_version" in message
    assert "line 13: cluster_typo: unknown field; allowed here: name, model, capacity" in message
    assert "line 15: serving.extra_args.1: Input should be a valid string (got 8, an integer)" in message
    assert "put the value in quotes" in message
    assert "Traceback" not in message


def test_a_json_list_where_the_spec_or_a_section_belongs(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text('[{"name": "k3-demo"}]')
    with pytest.raises(SpecError, match="must be a mapping of fields .* got a list"):
        load_spec(spec, now=NOW)
    with pytest.raises(SpecError, match="capacity: Input should be a mapping of fields"):
        parse_spec(with_value(("capacity",), ["ec2-capacity-block"]), now=NOW)


def test_regions_and_hub_repos_must_look_like_them() -> None:
    for bad in ("mars north", "US-EAST-2", "us-east-2a"):
        with pytest.raises(SpecError, match="capacity.regions.0: String should match pattern"):
            parse_spec(with_value(("capacity", "regions"), [bad]), now=NOW)
    with pytest.raises(SpecError, match="model.repo: String should match pattern"):
        parse_spec(with_value(("model",), {"repo": "https://huggingface.co/moonshotai/Kimi-K3"}), now=NOW)
