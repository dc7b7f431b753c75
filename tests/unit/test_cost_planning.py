"""Planning before buying: expected utilisation and cost per million tokens for an offer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from capserve.core.capacity.offers import Offer
from capserve.core.cost.planning import (
    ExpectedTimeline,
    ThroughputEstimate,
    expected_resources,
    forecast_offer,
    forecast_table,
    forecast_window,
)
from capserve.core.cost.prices import load_price_table
from capserve.core.cost.spec import CostSpec

START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
PRICES = load_price_table()
ESTIMATE = ThroughputEstimate(output_tokens_per_s=2400, concurrency=32, source="campaign k3-nov report, c32")


def test_a_24h_block_with_the_default_timeline() -> None:
    forecast = forecast_window(
        label="one day",
        start=START,
        end=START + timedelta(hours=24),
        upfront_fee=2880,
        instance_count=1,
        gpus_per_instance=8,
        prices=PRICES,
        region="us-east-1",
        throughput=ESTIMATE,
    )
    # Defaults: bring-up 20 + node readiness 10 + weights 30 + cold start 75 + evaluation 30 = 165 min;
    # drain at end − 45 (15 min margin + AWS's 30). Serving: 1440 − 165 − 45 = 1230 min.
    assert forecast.paid_gpu_hours == 192.0
    assert forecast.expected_serving_gpu_hours == pytest.approx(1230 * 8 / 60)
    assert forecast.expected_utilisation == pytest.approx(1230 / 1440)
    assert forecast.expected_lost_gpu_hours["vllm_cold_start"] == 10.0
    # Tokens: 2400 × 1230 × 60 = 177.12 M; $2880 / 177.12.
    assert forecast.expected_usd_per_million_output_tokens == pytest.approx(2880 / 177.12)
    assert forecast.serves


def test_a_warm_compile_cache_raises_expected_utilisation() -> None:
    common = {
        "label": "x",
        "start": START,
        "end": START + timedelta(hours=24),
        "upfront_fee": 2880.0,
        "instance_count": 1,
        "gpus_per_instance": 8,
        "prices": PRICES,
        "region": "us-east-1",
    }
    cold = forecast_window(**common)  # type: ignore[arg-type]
    warm = forecast_window(**common, timeline=ExpectedTimeline(compile_cache_warm=True))  # type: ignore[arg-type]
    # 75 → 25 min of start: 50 more serving minutes.
    assert warm.expected_serving_gpu_hours - cold.expected_serving_gpu_hours == pytest.approx(50 * 8 / 60)
    assert cold.expected_usd_per_million_output_tokens is None  # no throughput estimate given


def test_longer_blocks_dilute_the_fixed_losses() -> None:
    def utilisation(days: int) -> float:
        return forecast_window(
            label=f"{days} d",
            start=START,
            end=START + timedelta(days=days),
            upfront_fee=2880.0 * days,
            instance_count=1,
            gpus_per_instance=8,
            prices=PRICES,
            region="us-east-1",
        ).expected_utilisation

    # Fixed loss 210 min: 1 day → 1230/1440; 7 days → (10080 − 210)/10080.
    assert utilisation(1) == pytest.approx(1230 / 1440)
    assert utilisation(7) == pytest.approx(9870 / 10080)


def test_a_block_shorter_than_the_fixed_losses_serves_nothing_and_gives_no_cost_per_token() -> None:
    forecast = forecast_window(
        label="too short",
        start=START,
        end=START + timedelta(hours=3),
        upfront_fee=360,
        instance_count=1,
        gpus_per_instance=8,
        prices=PRICES,
        region="us-east-1",
        throughput=ESTIMATE,
    )
    # 165 min of stages run into the drain point at 135 min: nothing serves.
    assert forecast.expected_serving_gpu_hours == 0 and not forecast.serves
    assert forecast.expected_utilisation == 0
    assert forecast.expected_usd_per_million_output_tokens is None
    assert "below target" in forecast.markdown_row()


def test_an_offer_forecast_includes_the_other_resources() -> None:
    offer = Offer(
        provider="ec2-capacity-block",
        region="us-east-2",
        availability_zone="us-east-2a",
        offering_id="cb-0123456789abcdef0",
        start=START,
        end=START + timedelta(hours=48),
        instance_type="p6-b300.48xlarge",
        instance_count=2,
        upfront_fee=11520,
    )
    resources = expected_resources(block_hours=48, lead_hours=2, weights_gb=1560)
    forecast = forecast_offer(offer, gpus_per_instance=8, prices=PRICES, resources=resources, throughput=ESTIMATE)
    assert forecast.gpus == 16 and forecast.paid_gpu_hours == 48 * 16
    # 50 h: EKS 50 × 0.10 = 5.00; 2 × m7i.large × 50 × 0.1008 = 10.08; NAT gateway 50 × 0.045 = 2.25;
    # 3 public IPv4 (NAT, 2 system nodes) × 50 × 0.005 = 0.75; S3 1560 GB × 50 h / 730 × 0.023 ≈ 2.4575.
    expected = 5.00 + 10.08 + 2.25 + 0.75 + 1560 * 50 / 730 * 0.023
    assert forecast.other_resources_cost == pytest.approx(expected, abs=1e-3)
    # Serving (2880 − 210) min; tokens 2400 × 2670 × 60.
    tokens_m = 2400 * 2670 * 60 / 1e6
    assert forecast.expected_usd_per_million_output_tokens == pytest.approx(
        (11520 + forecast.other_resources_cost) / tokens_m
    )
    table = forecast_table([forecast])
    assert offer.label() in table and "campaign k3-nov report, c32" in table
    assert forecast.to_json()["throughput"]["source"] == "campaign k3-nov report, c32"


def test_forecast_table_says_when_there_is_no_estimate() -> None:
    forecast = forecast_window(
        label="x",
        start=START,
        end=START + timedelta(hours=24),
        upfront_fee=1,
        instance_count=1,
        gpus_per_instance=8,
        prices=PRICES,
        region="us-east-1",
    )
    assert "No throughput estimate" in forecast_table([forecast])


def test_the_drain_margin_cannot_reach_into_awss_30_minutes() -> None:
    with pytest.raises(ValidationError):
        ExpectedTimeline(drain_before_end_minutes=30)


def test_cost_spec_defaults_and_an_estimate_needs_its_source() -> None:
    assert CostSpec().utilisation_target == 0.8
    with pytest.raises(ValidationError, match="together"):
        CostSpec(expected_output_tokens_per_s=1000)
    spec = CostSpec(expected_output_tokens_per_s=1000, throughput_source="vLLM recipes benchmark")
    assert spec.throughput_source == "vLLM recipes benchmark"


def test_the_campaign_spec_takes_a_cost_section() -> None:
    from pathlib import Path

    import yaml

    from capserve.core.errors import SpecError
    from capserve.core.spec import parse_spec

    example = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
    data = yaml.safe_load(example.read_text(encoding="utf-8"))
    assert parse_spec(data).cost.utilisation_target == 0.8
    data["cost"] = {"utilisation_target": 0.9, "expected_output_tokens_per_s": 2400, "throughput_source": "k3-nov"}
    assert parse_spec(data).cost.expected_output_tokens_per_s == 2400
    data["cost"] = {"utilisation_target": 1.5}
    with pytest.raises(SpecError, match="cost.utilisation_target"):
        parse_spec(data)
