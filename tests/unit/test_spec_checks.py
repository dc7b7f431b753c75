"""The checks a spec's values meet before anything is bought (capserve.core.spec_checks, strict YAML)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capserve.core.errors import SpecError
from capserve.core.spec_checks import (
    capacity_block_window_problems,
    catalog_id_problem,
    image_reference_problem,
    name_problem,
    non_finite_paths,
    open_loop_time_problem,
    registry_host,
    s3_prefix_problem,
)
from capserve.core.strict_yaml import parse_document

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.mark.parametrize("reference", [
    "vllm/vllm-openai:kimi-k3", "vllm/vllm-openai", "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
    "localhost:5000/a/b__c-d.e:tag_1", "123456789012.dkr.ecr.us-east-2.amazonaws.com/vllm@sha256:" + "a" * 64,
    "public.ecr.aws/aws-cli/aws-cli:2.27.50@sha256:" + "0" * 64, "[::1]:5000/x:y",
])
def test_image_references_kubelets_pull_are_accepted(reference: str) -> None:
    assert image_reference_problem(reference) is None


@pytest.mark.parametrize("reference", [
    "vllm openai", "vllm/VLLM:x", "vllm/vllm:", "vllm/vllm:-tag", "vllm//vllm", "vllm/vllm@sha256:abc",
    "https://docker.io/vllm/vllm", "vllm/vllm:" + "t" * 129,
])
def test_malformed_image_references_are_refused(reference: str) -> None:
    assert (image_reference_problem(reference) or "").startswith("not an image reference")


@pytest.mark.parametrize(("prefix", "ok"), [
    ("capserve/weights", True), ("", True), ("a.b/c..d", True), ("/capserve", False), ("capserve/", False),
    ("a//b", False), ("a/./b", False), ("a/../b", False), ("..", False),
])
def test_s3_prefixes_with_empty_or_dot_segments_are_refused(prefix: str, ok: bool) -> None:
    assert (s3_prefix_problem(prefix) is None) is ok


def test_non_finite_numbers_are_found_with_their_paths() -> None:
    data = {"a": [1.0, float("nan")], "b": {"c": float("-inf")}, "d": 1e308}
    assert non_finite_paths(data) == ["a.1", "b.c"]


def test_a_window_that_is_over_or_too_far_ahead_is_refused() -> None:
    assert "is over" in capacity_block_window_problems(NOW - 9 * DAY, NOW - DAY, DAY, now=NOW)[0]
    far = NOW + timedelta(weeks=9)
    assert "more than 8 weeks ahead" in capacity_block_window_problems(far, far + 9 * DAY, DAY, now=NOW)[0]


def test_a_future_window_needs_an_11_30_start_with_room_for_the_block() -> None:
    start = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)  # just after 11:30: the first start is the next day's
    first_end = datetime(2026, 12, 7, 11, 30, tzinfo=UTC)
    assert capacity_block_window_problems(start, first_end, DAY, now=NOW) == []
    refused = capacity_block_window_problems(start, first_end - timedelta(minutes=1), DAY, now=NOW)
    assert "the earliest would end 2026-12-07T11:30:00+00:00" in refused[0]


def test_a_window_that_has_begun_is_left_to_the_offers_and_to_adoption() -> None:
    # A re-run of a campaign that holds a block bought yesterday must not be refused here.
    assert capacity_block_window_problems(NOW - DAY, NOW + DAY, 2 * DAY, now=NOW) == []


@pytest.mark.parametrize(("text", "message"), [
    ("a: 0060", "'0060' has a leading zero, which YAML 1.1 reads as octal (it would be 48)"),
    ("a: 1:00", "'1:00' is a base-60 number in YAML 1.1 (it would read as 60)"),
    ("a: 1:30.5", "'1:30.5' is a base-60 number"),
    ("a: !!set {x, y}", "the YAML type !!set is not allowed"),
    ("a: !!binary aGVsbG8=", "the YAML type !!binary is not allowed"),
    ("a: !!omap [x: 1]", "the YAML type !!omap is not allowed"),
])
def test_yaml_1_1_readings_a_person_did_not_mean_are_refused(text: str, message: str) -> None:
    with pytest.raises(SpecError, match="line 1: ") as caught:
        parse_document(text.encode(), "spec.yaml")
    assert message in str(caught.value)


@pytest.mark.parametrize(("text", "value"), [("a: 0", 0), ("a: 60", 60), ("a: 0x1F", 31), ("a: '0060'", "0060"),
                                             ("a: 0.5", 0.5), ("a: 1_000", 1000)])
def test_plain_numbers_read_as_written(text: str, value: object) -> None:
    assert parse_document(text.encode(), "spec.yaml").data == {"a": value}


@pytest.mark.parametrize(("reference", "message"), [
    ("Vllm/vllm-openai:v0.32.0", "'Vllm' has upper-case letters, so it is read as a registry host"),
    ("Registry.Example.COM/vllm/x:y", "the registry host 'Registry.Example.COM' has upper-case letters"),
])
def test_an_upper_case_registry_part_is_refused(reference: str, message: str) -> None:
    assert (image_reference_problem(reference) or "").startswith(message)


@pytest.mark.parametrize(("name", "message"), [
    ("", "is empty"),
    ("kimi\u202ek3", "U+202E (RIGHT-TO-LEFT OVERRIDE, Unicode category Cf)"),
    ("kimi\u200bk3", "U+200B (ZERO WIDTH SPACE, Unicode category Cf)"),
    ("kimi\x07k3", "U+0007"),
    (" kimi", "starts or ends with white space"),
])
def test_names_with_invisible_characters_are_refused(name: str, message: str) -> None:
    assert message in (name_problem(name) or "")


def test_a_plain_name_passes() -> None:
    assert name_problem("moonshotai/Kimi-K3 (réplica 2)") is None


def test_open_loop_runs_that_outlast_the_timeout_say_the_largest_that_fits() -> None:
    assert open_loop_time_problem(48, [8.0], 900.0) is None
    problem = open_loop_time_problem(100_000, [8.0, 2.0], 900.0) or ""
    # 1/8 + 1/2 = 0.625 s a request: 900 s hold 1,440.
    assert "take 62,500 s just to send" in problem and "the largest that fits is 1,440" in problem


def test_a_catalog_id_in_other_case_is_refused_with_the_nearest_id() -> None:
    problem = catalog_id_problem("catalog model", "KIMI-K3", ["kimi-k2", "kimi-k3"]) or ""
    assert problem.startswith("unknown catalog model 'KIMI-K3': did you mean 'kimi-k3'?")
    assert catalog_id_problem("catalog model", "kimi-k3", ["kimi-k3"]) is None


@pytest.mark.parametrize(("reference", "host"), [
    ("vllm/vllm-openai:x", None), ("vllm-openai", None), ("Vllm/vllm-openai:x", "Vllm"),
    ("localhost/x", "localhost"), ("nvcr.io/nvidia/x:1", "nvcr.io"), ("host:5000/x", "host:5000"),
])
def test_the_registry_host_is_split_as_distribution_reference_does(reference: str, host: str | None) -> None:
    assert registry_host(reference) == host
