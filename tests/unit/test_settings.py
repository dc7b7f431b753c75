"""Settings: every knob reaches ``Settings`` from the environment, a misspelt name is refused naming the
variable, a spec's ``settings:`` block overrides one campaign, and every knob is documented."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from capserve.core.errors import SpecError
from capserve.core.locations import BucketLocation, Locations
from capserve.core.record import CampaignRecord
from capserve.core.report import CampaignReport
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.tasks import aws, resilience
from capserve.tasks.settings import process_settings, settings_for, settings_from_environment
from tests.unit.rollout_fixtures import k3_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def leaves(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    """Every field of ``model`` that is not itself a section, with its path."""
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from leaves(kind, (*path, name))
        else:
            yield (*path, name), info


def variable(path: tuple[str, ...]) -> str:
    return "CAPSERVE_" + "__".join(path).upper()


def value_at(settings: BaseModel, path: tuple[str, ...]) -> Any:
    node: Any = settings
    for part in path:
        node = getattr(node, part)
    return node


NUMBERS = {path: info for path, info in leaves(Settings) if info.annotation in (int, float)}
KNOBS = {path: info for path, info in NUMBERS.items() if any(w in path[-1] for w in ("timeout", "retries", "attempt"))}


def another_value(path: tuple[str, ...], info: FieldInfo) -> int | float:
    """A value within the field's bounds that is not its default."""
    low, high, strict = 0.0, 1e9, False
    for bound in info.metadata:
        if isinstance(bound, Ge):
            low = float(bound.ge)  # type: ignore[arg-type]
        elif isinstance(bound, Gt):
            low = float(bound.gt)  # type: ignore[arg-type]
        elif isinstance(bound, Le):
            high = float(bound.le)  # type: ignore[arg-type]
        elif isinstance(bound, Lt):
            high, strict = float(bound.lt), True  # type: ignore[arg-type]
    default = value_at(Settings(), path)
    up = default + 1
    chosen = up if up < high or (up == high and not strict) else (low + default) / 2
    if info.annotation is int:
        chosen = int(chosen) if int(chosen) != default else default - 1
    assert chosen != default and low <= chosen <= high, path
    return chosen


def test_the_walk_finds_every_kind_of_timeout_and_retry() -> None:
    assert {
        ("rollout_wait", "delete_timeout_s"),
        ("rollout_wait", "cache_save_timeout_s"),
        ("bring_up", "kube", "request_timeout_s"),
        ("retries", "aws", "retries"),
        ("retries", "kubernetes", "retries"),
        ("weights", "fetch_retries"),
        ("rollout_wait", "endpoint_check_attempts"),
        ("aws", "max_attempts"),
        ("aws", "read_timeout_s"),
    } <= set(KNOBS)


@pytest.mark.parametrize("path", sorted(KNOBS), ids=variable)
def test_every_timeout_and_retry_is_bounded(path: tuple[str, ...]) -> None:
    bounds = {type(bound) for bound in KNOBS[path].metadata}
    assert bounds & {Ge, Gt} and bounds & {Le, Lt}, f"{variable(path)} needs a lower and an upper bound"


@pytest.mark.parametrize("path", sorted(NUMBERS), ids=variable)
def test_every_number_is_settable_from_the_environment(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = another_value(path, NUMBERS[path])
    monkeypatch.setenv(variable(path), str(wanted))
    assert value_at(settings_from_environment(), path) == wanted


def test_names_are_read_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("capserve_rollout_wait__delete_timeout_s", "61")
    assert settings_from_environment().rollout_wait.delete_timeout_s == 61


def test_aws_clients_are_made_with_the_environment_s_attempts_and_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSERVE_AWS__MAX_ATTEMPTS", "2")
    monkeypatch.setenv("CAPSERVE_AWS__READ_TIMEOUT_S", "17")
    process_settings.cache_clear()
    aws._client_config.cache_clear()
    try:
        config = aws.client("sts", "us-east-1").meta.config
    finally:
        process_settings.cache_clear()
        aws._client_config.cache_clear()
    assert (config.retries["total_max_attempts"], config.read_timeout) == (2, 17)


def test_one_field_of_a_retry_policy_keeps_the_rest_of_that_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSERVE_RETRIES__AWS__RETRIES", "6")
    aws = settings_from_environment().retries.aws
    assert (aws.retries, aws.first_delay_s, aws.max_delay_s) == (6, Settings().retries.aws.first_delay_s, 30)


def test_a_task_is_made_with_the_environment_s_retry_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSERVE_RETRIES__KUBERNETES__RETRIES", "7")
    monkeypatch.setenv("CAPSERVE_RETRIES__KUBERNETES__FIRST_DELAY_S", "3")
    process_settings.cache_clear()
    try:
        made = resilience.kube_task("settings-test")(lambda: None)
    finally:
        process_settings.cache_clear()
    assert (made.retries, made.retry_delay_seconds[0]) == (7, 3.0)  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CAPSERVE_ROLLOUT_WAIT__DELETE_TIMEOUT", "60", "CAPSERVE_ROLLOUT_WAIT__DELETE_TIMEOUT: unknown setting"),
        ("CAPSERVE_RETRIE__AWS__RETRIES", "1", "CAPSERVE_RETRIE__AWS__RETRIES: unknown setting"),
        ("capserve_retries__aws__retry", "1", "capserve_retries__aws__retry: unknown setting"),
        ("CAPSERVE_BRING_UP__POLL_SECONDS__X", "1", "CAPSERVE_BRING_UP__POLL_SECONDS__X: unknown setting"),
        ("CAPSERVE_RETRIES__AWS__RETRIES", "11", "CAPSERVE_RETRIES__AWS__RETRIES: Input should be less than"),
        ("CAPSERVE_ROLLOUT_WAIT__DELETE_TIMEOUT_S", "soon", "CAPSERVE_ROLLOUT_WAIT__DELETE_TIMEOUT_S: Input should be"),
    ],
)
def test_a_misspelt_or_bad_setting_is_refused_naming_the_variable(
    name: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SpecError, match=message):
        settings_from_environment()


def test_variables_without_a_level_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSERVE_ROLLOUT_WAIT", '{"delete_timeout_s": 60}')  # no '__': another knob's name
    assert settings_from_environment().rollout_wait.delete_timeout_s == Settings().rollout_wait.delete_timeout_s


def test_a_spec_overrides_the_environment_for_its_campaign(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSERVE_ROLLOUT_WAIT__CACHE_SAVE_TIMEOUT_S", "120")
    monkeypatch.setenv("CAPSERVE_ROLLOUT_WAIT__DELETE_TIMEOUT_S", "90")
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["settings"] = {"rollout_wait": {"delete_timeout_s": 60}, "rollout": {"probe_timeout_s": 7}}
    settings = settings_for(CampaignSpec.model_validate(data))
    assert (settings.rollout_wait.delete_timeout_s, settings.rollout_wait.cache_save_timeout_s) == (60, 120)
    assert settings.rollout.probe_timeout_s == 7


def test_retry_policies_are_not_a_campaign_s_to_set() -> None:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["settings"] = {"retries": {"aws": {"retries": 0}}}
    with pytest.raises(ValueError, match="retries: unknown field"):
        CampaignSpec.model_validate(data)


@pytest.mark.parametrize("path", sorted(path for path, _ in leaves(Settings)), ids=variable)
def test_every_setting_is_documented(path: tuple[str, ...]) -> None:
    assert f"`{variable(path)}`" in DOCS.read_text(encoding="utf-8")


def test_the_rollout_is_given_the_run_s_rollout_wait_and_kube_settings(tmp_path: Path) -> None:
    from capserve.campaign.context import CampaignContext, RunOptions
    from capserve.flows.campaign import rollout_inputs

    the_spec = load_spec(EXAMPLE)
    settings = settings_for(the_spec).updated({
        "rollout": {"port": 8100}, "rollout_wait": {"delete_timeout_s": 61},
        "bring_up": {"kube": {"watch_window_s": 7}},
    })
    bucket = BucketLocation(bucket="capserve-settings-test", region="us-east-2")
    earlier = {"plan": k3_plan(), "weights": object(), "node_staging": object(), "cluster": SimpleNamespace(kind="eks")}
    ctx = CampaignContext(
        spec=the_spec,
        settings=settings,
        options=RunOptions(out_dir=tmp_path, staging_dir=tmp_path),
        report=CampaignReport(campaign=the_spec.campaign_id).model_copy(update=earlier),  # stand-ins: not read here
        record=CampaignRecord.new(the_spec.campaign_id, datetime(2026, 12, 1, tzinfo=UTC)),
        _locations=Locations(campaign_id=the_spec.campaign_id, records=bucket, weights=bucket,
                             capacity_regions=("us-east-2",)),
    )
    given = rollout_inputs(ctx)
    assert (given.rollout, given.wait, given.kube) == (settings.rollout, settings.rollout_wait, settings.bring_up.kube)
