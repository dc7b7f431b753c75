"""The rehearsal: a campaign's own path on on-demand capacity, start to teardown, before a block is bought (pure).

A Capacity Block or training plan cannot be cancelled; a rehearsal runs the same stages (network, IAM, EKS
control plane, node group, add-ons, Hub → S3 → node → vLLM → evaluation gate, teardown) on on-demand
instances of the same GPU family for tens of dollars, and leaves a record the purchase can require
(``capacity.require_rehearsal``; docs/rehearsal.md says what it proves and what only a block can).

Here, without any SDK:

- ``rehearsal_refusal``: what a rehearsal cannot rehearse (HyperPod, an existing cluster);
- ``choose_instance_type``: ``rehearsal.instance_type``, else the cheapest type of the campaign's GPU family
  in the price table;
- ``rehearsal_spec``: the campaign spec as the rehearsal runs it (its own campaign id, so its teardown can
  never touch the campaign's resources; the small model; one node);
- ``rehearsal_proof`` / ``rehearsal_digest``: what a rehearsal proves for a campaign, and its sha256; the
  campaign's acquire stage computes the same digest from the same spec and looks for a record of it;
- ``RehearsalRecord``: the JSON document kept next to the campaign record, and ``rehearsal_problem``, the
  one message that refuses a purchase without a passing, recent one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.capacity.zones import AVAILABILITY_ZONE, Zone
from capserve.core.catalog import get_instance_type
from capserve.core.catalog.hardware import INSTANCE_TYPES
from capserve.core.cluster.addons import AddonImages
from capserve.core.cluster.eks import launch_template_shape
from capserve.core.cluster.hyperpod import HYPERPOD_GPU_TYPES
from capserve.core.cluster.network import EKS_DISALLOWED_ZONE_IDS, EKS_MIN_AZS, PRIVATE_CIDR_INDEX
from capserve.core.cluster.vendored import VENDORED
from capserve.core.cost.prices import PriceQuote, PriceStatus, PriceTable
from capserve.core.digest import SHA256_HEX, digest
from capserve.core.lease import ON_DEMAND, ON_DEMAND_RESERVATION, Lease
from capserve.core.markdown import markdown_table
from capserve.core.spec import CampaignSpec
from capserve.core.stages import StageStatus

REHEARSAL_SCHEMA_VERSION: Literal[1] = 1
REHEARSAL_SUFFIX = "-rh"
# What the rehearsal's campaign id hashes its tail into when the campaign's name is too long to suffix
# (campaign names are at most 40 characters: capserve.core.spec.DNS_LABEL).
_MAX_NAME = 40
PRICE_KEY = "ec2.on_demand.{instance_type}"
# Where the price table's on-demand prices are quoted when the home region has none (the table's best-checked one).
PRICE_FALLBACK_REGION = "us-east-1"

Result = Literal["pass", "fail"]


def rehearse_command(spec_source: str = "<spec.yaml>") -> str:
    return f"capserve rehearse {spec_source}"


def rehearsal_campaign_id(campaign_id: str) -> str:
    """The rehearsal's own campaign id: every resource it makes is tagged with it, never with the campaign's,
    so its teardown (and the reaper) cannot delete anything of the campaign."""
    if len(campaign_id) + len(REHEARSAL_SUFFIX) <= _MAX_NAME:
        return campaign_id + REHEARSAL_SUFFIX
    tail = digest(campaign_id)[:6]
    return f"{campaign_id[: _MAX_NAME - len(REHEARSAL_SUFFIX) - 7].rstrip('-')}-{tail}{REHEARSAL_SUFFIX}"


def rehearsal_refusal(spec: CampaignSpec) -> str | None:
    """Why ``spec`` cannot be rehearsed (None: it can)."""
    if spec.cluster.existing_cluster_name:
        return (
            f"cluster.existing_cluster_name is {spec.cluster.existing_cluster_name!r}: a rehearsal builds (and "
            "deletes) a cluster of its own and never touches an existing one; rehearse a spec without it"
        )
    return None


class InstanceChoice(BaseModel):
    """The rehearsal's on-demand instance type, its price (None: the table has none) and why it was chosen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type.")
    price: PriceQuote | None = Field(None, description="Its on-demand price per instance-hour, with its source.")
    why: str = Field(max_length=500, description="How it was chosen.")


def on_demand_price(prices: PriceTable, instance_type: str, region: str) -> PriceQuote | None:
    """The table's on-demand price of ``instance_type`` in ``region`` (else in PRICE_FALLBACK_REGION, marked so)."""
    key = PRICE_KEY.format(instance_type=instance_type)
    quote = prices.quote(key, region)
    if quote is None:
        fallback = prices.quote(key, PRICE_FALLBACK_REGION)
        if fallback is not None:
            quote = fallback.model_copy(update={"status": "unconfirmed"})
    return quote


def choose_instance_type(spec: CampaignSpec, prices: PriceTable) -> InstanceChoice:
    """``rehearsal.instance_type``; else the cheapest type of the campaign's GPU family the price table prices
    (fewest GPUs on a tie); else the campaign's own type, unpriced."""
    region = spec.capacity.regions[0]
    named = spec.rehearsal.instance_type
    if named is not None:
        name = get_instance_type(named).name
        return InstanceChoice(instance_type=name, price=on_demand_price(prices, name, region),
                              why="rehearsal.instance_type")
    family = get_instance_type(spec.capacity.instance_type).gpu.family
    # A HyperPod instance group takes only the types SageMaker offers it; they are ranked by EC2's price (the
    # table has no SageMaker ml. prices, which run higher: the rehearsal's cost says so).
    hyperpod = spec.cluster.kind == "hyperpod"
    priced = [
        (quote, instance)
        for instance in INSTANCE_TYPES.values()
        if instance.gpu.family == family and (not hyperpod or instance.name in HYPERPOD_GPU_TYPES)
        and (quote := on_demand_price(prices, instance.name, region)) is not None
    ]
    if not priced:
        return InstanceChoice(
            instance_type=spec.capacity.instance_type,
            why=f"the price table prices no {family} type on demand: the campaign's own type",
        )
    quote, instance = min(priced, key=lambda pair: (pair[0].usd, pair[1].gpus_per_node, pair[1].name))
    why = f"the cheapest {family} type on demand in capserve's price table (of {len(priced)} priced)"
    if hyperpod:
        quote = quote.model_copy(update={"status": "unconfirmed"})
        why = (f"the cheapest {family} type HyperPod offers, by EC2's on-demand price (of {len(priced)} priced); "
               "HyperPod bills SageMaker's ml. rate, which is higher and not in the table")
    return InstanceChoice(instance_type=instance.name, price=quote, why=why)


def rehearsal_spec(spec: CampaignSpec, instance_type: str) -> CampaignSpec:
    """The campaign spec as its rehearsal runs it.

    The same region (the home one, ``capacity.regions[0]``), cluster kind and version, network, add-ons, image,
    weights bucket, evaluation gates and margins; its own campaign id; ``rehearsal.model`` on one node of
    ``instance_type``. The model's own serving options go with the model: extra arguments, the context length
    and the startup budget are the campaign's model's, not the small one's; the served name stays, so the
    evaluation asks for the same model name.
    """
    capacity = spec.capacity.model_copy(update={
        "instance_type": instance_type, "instance_count": 1, "regions": [spec.capacity.regions[0]],
        "require_rehearsal": False,
    })
    serving = spec.serving.model_copy(update={
        "extra_args": [], "max_model_len": None, "startup_budget_minutes": None, "replicas": 1,
        "served_model_name": spec.served_model_name,
    })
    # Bring-up must leave the rehearsal's whole window: its lease (on_demand_lease) ends that long after drain.
    cluster = spec.cluster.model_copy(update={"min_serving_minutes": 0})
    # The tool-call parser is the campaign's model's (its catalog recipe): the small model is asked for a call
    # through structured outputs instead, which needs no parser (docs/rehearsal.md, what only a block proves).
    smoke = spec.evaluation.smoke.model_copy(update={"tool_choice": "required"})
    evaluation = spec.evaluation.model_copy(update={"smoke": smoke})
    document = spec.model_copy(update={
        "name": rehearsal_campaign_id(spec.campaign_id), "model": spec.rehearsal.model, "capacity": capacity,
        "serving": serving, "cluster": cluster, "evaluation": evaluation,
    }).model_dump(mode="json")
    return CampaignSpec.model_validate(document)  # validated again: the copy obeys every rule the spec does


def on_demand_lease(rehearsal: CampaignSpec, *, availability_zone: str, now: datetime) -> Lease:
    """The rehearsal's capacity as a lease: on-demand, nothing bought, usable now, for ``rehearsal.max_minutes``
    before its drain point (the bring-up deadline and the reaper read it as they read a block's)."""
    minutes = rehearsal.rehearsal.max_minutes + rehearsal.teardown.drain_before_end_minutes
    return Lease(
        provider=ON_DEMAND,
        region=rehearsal.capacity.regions[0],
        availability_zone=availability_zone,
        reservation_id=ON_DEMAND_RESERVATION,
        start=now,
        end=now + timedelta(minutes=minutes),
        instance_type=rehearsal.capacity.instance_type,
        instance_count=rehearsal.capacity.instance_count,
        upfront_fee=0.0,
    )


def rehearsal_proof(spec: CampaignSpec, *, vpc_cidr: str) -> dict[str, Any]:
    """What a passing rehearsal proves for ``spec``: the same for the campaign and for its rehearsal (both
    compute it from the campaign's spec), so a change to any of it asks for a new rehearsal.

    ``vpc_cidr``: the bring-up setting the network is built with. The image counts as written: pin
    ``serving.image`` by digest (``…@sha256:…``) and the rehearsal proves those very bytes.
    """
    instance = get_instance_type(spec.capacity.instance_type)
    shape_lease = Lease(
        provider=spec.capacity.provider, region=spec.capacity.regions[0], availability_zone="shape",
        reservation_id="shape", start=datetime.fromisoformat("2000-01-01T00:00:00+00:00"),
        end=datetime.fromisoformat("2000-01-02T00:00:00+00:00"), instance_type=instance.name, instance_count=1,
        upfront_fee=0.0,
    )
    return {
        "region": spec.capacity.regions[0],
        "cluster": {"kind": spec.cluster.kind, "kubernetes_version": spec.cluster.kubernetes_version},
        "network": {
            "vpc_cidr": vpc_cidr,
            "control_plane_azs": EKS_MIN_AZS,
            "refused_zone_ids": sorted(EKS_DISALLOWED_ZONE_IDS),
            "gpu_subnet": f"private, index {PRIVATE_CIDR_INDEX}, behind a NAT gateway, S3 gateway endpoint",
        },
        "addons": {
            "vendored": [{"repository": v.repository, "version": v.version, "sha256": v.sha256} for v in VENDORED],
            "images": AddonImages().model_dump(mode="json"),
        },
        "image": {"reference": spec.serving.image, "mirror": spec.serving.image_mirror},
        "weights": {"bucket": spec.weights.s3_bucket, "region": spec.weights_region},
        "launch_template": launch_template_shape(shape_lease, instance),
    }


def rehearsal_digest(spec: CampaignSpec, *, vpc_cidr: str) -> str:
    return digest(rehearsal_proof(spec, vpc_cidr=vpc_cidr))


def rehearsal_key(campaign_id: str, proof_digest: str) -> str:
    """Beside the campaign record (``capserve.core.record.record_key``), one document per digest."""
    return f"capserve/campaigns/{campaign_id}/rehearsals/{proof_digest}.json"


class RehearsalCheck(BaseModel):
    """One stage of the rehearsal: how it ended and how long it took."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="The stage.")
    status: StageStatus = Field(description="How it ended.")
    started_at: AwareDatetime = Field(description="When it started.")
    ended_at: AwareDatetime | None = Field(None, description="When it ended (None: it never did).")
    seconds: float | None = Field(None, ge=0, description="How long it took.")
    detail: str = Field("", max_length=4000, description="Why it failed, stopped or was skipped.")


class RehearsalCost(BaseModel):
    """What the rehearsal's GPU instances cost: the on-demand price × the minutes they could have run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str = Field(min_length=1, max_length=64, description="The on-demand type.")
    instances: int = Field(ge=1, le=64, description="How many.")
    minutes: float = Field(ge=0, description="From the start of bring-up to the end of teardown (an upper bound).")
    usd_per_hour: float | None = Field(None, ge=0, description="On-demand price per instance-hour (None: unknown).")
    usd: float | None = Field(None, ge=0, description="usd_per_hour × instances × minutes / 60 (None: unknown).")
    price_status: PriceStatus | None = Field(None, description="How sure the price is (capserve.core.cost.prices).")
    source: str = Field("", max_length=500, description="Where the price comes from.")
    note: str = Field("", max_length=500, description="What the figure leaves out.")


def rehearsal_cost(choice: InstanceChoice, instances: int, minutes: float, *, table_date: str) -> RehearsalCost:
    price = choice.price
    note = ("GPU instances only; the EKS control plane, the NAT gateway and the system nodes add a few dollars an "
            "hour (docs/cost.md)")
    if price is None:
        return RehearsalCost(instance_type=choice.instance_type, instances=instances, minutes=minutes,
                             source="no on-demand price in capserve's price table", note=note)
    return RehearsalCost(
        instance_type=choice.instance_type, instances=instances, minutes=round(minutes, 2), usd_per_hour=price.usd,
        usd=round(price.usd * instances * minutes / 60, 2), price_status=price.status,
        source=f"capserve/core/cost/data/prices.yaml ({table_date}) {price.key} in {price.region}: {price.source}",
        note=note,
    )


class RehearsalRecord(BaseModel):
    """A rehearsal's result, kept in S3 at ``rehearsal_key(campaign, digest)``: what the purchase looks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(REHEARSAL_SCHEMA_VERSION, description="Bumped on incompatible changes.")
    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign rehearsed.")
    rehearsal_id: str = Field(min_length=1, max_length=64, description="The rehearsal's own campaign id (its tags).")
    digest: str = Field(pattern=SHA256_HEX, description="sha256 of what it proves (rehearsal_proof).")
    proves: dict[str, Any] = Field(description="What it proves (rehearsal_proof), as hashed.")
    rehearsed_at: AwareDatetime = Field(description="When it ended.")
    result: Result = Field(description="pass: every stage completed, the evaluation passed and teardown finished.")
    checks: tuple[RehearsalCheck, ...] = Field(max_length=64, description="Each stage, in order, with its time.")
    verdict: str | None = Field(None, max_length=32, description="The evaluation's verdict (None: never evaluated).")
    region: str = Field(min_length=1, max_length=32, description="Where it ran.")
    model: str = Field(min_length=1, max_length=300, description="The small model it served.")
    cost: RehearsalCost = Field(description="What it cost, and the price's source.")
    why: str = Field("", max_length=4000, description="Why it failed (empty when it passed).")

    def report_section(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"proves"})

    def markdown(self) -> str:
        cost = self.cost
        usd = f"${cost.usd:,.2f}" if cost.usd is not None else "unknown"
        price = f"${cost.usd_per_hour:,.4g}/h ({cost.price_status})" if cost.usd_per_hour is not None else "none"
        lines = [
            f"**{self.result.upper()}** — rehearsal of campaign `{self.campaign_id}` (digest `{self.digest[:12]}…`), "
            f"{self.rehearsed_at.isoformat()}, in {self.region}, serving `{self.model}`; evaluation verdict: "
            f"{self.verdict or 'none'}.",
        ]
        if self.why:
            lines += ["", f"Why: {self.why}"]
        rows = [
            {"check": c.name, "status": c.status.value, "started (UTC)": f"{c.started_at:%Y-%m-%d %H:%M:%S}",
             "took": f"{c.seconds:.1f} s" if c.seconds is not None else "—"}
            for c in self.checks
        ]
        lines += ["", markdown_table(rows).rstrip(), "",
                  f"Cost: {usd} = {cost.instances} × {cost.instance_type} at {price} × {cost.minutes:g} min. "
                  f"Source: {cost.source}. {cost.note}."]
        return "\n".join(lines) + "\n"


def rehearsal_result(checks: list[RehearsalCheck], verdict: str | None) -> tuple[Result, str]:
    """pass only when every stage completed, the evaluation's verdict is pass and teardown completed."""
    problems = [f"{c.name} {c.status.value}{': ' + c.detail if c.detail else ''}"
                for c in checks if c.status is not StageStatus.COMPLETED]
    if not any(c.name == "teardown" for c in checks):
        problems.append("teardown did not run")
    if verdict != "pass":
        problems.append(f"the evaluation's verdict is {verdict or 'missing'}")
    return ("fail", "; ".join(problems)[:4000]) if problems else ("pass", "")


def rehearsal_problem(
    spec: CampaignSpec, record: RehearsalRecord | None, proof_digest: str, *, now: datetime
) -> str | None:
    """Why the campaign may not buy yet under ``capacity.require_rehearsal`` (None: it may). One message,
    saying how to rehearse."""
    if not spec.capacity.require_rehearsal:
        return None
    days = spec.capacity.rehearsal_valid_days
    if record is None:
        found = f"no rehearsal of this spec (digest {proof_digest[:12]}…) is recorded"
    elif record.result != "pass":
        found = f"its rehearsal of {record.rehearsed_at.isoformat()} failed ({record.why or 'see its report'})"
    elif now - record.rehearsed_at > timedelta(days=days):
        found = f"its passing rehearsal of {record.rehearsed_at.isoformat()} is older than {days} days"
    else:
        return None
    return (
        f"campaign {spec.campaign_id} requires a passing rehearsal (capacity.require_rehearsal) within "
        f"{days} days, and {found}; nothing was bought. Rehearse it on on-demand capacity first: "
        f"`{rehearse_command()}` (docs/rehearsal.md), then run the campaign again"
    )


def rehearsal_line(record: RehearsalRecord | None) -> str:
    """The approval form's line about the rehearsal."""
    if record is None:
        return "none recorded for this spec"
    return f"{record.result} on {record.rehearsed_at.isoformat()} ({record.cost.instance_type}, digest " \
           f"{record.digest[:12]}…)"



def on_demand_zone(offered: list[str], zones: list[Zone]) -> str | None:
    """Where the rehearsal's GPU nodes go: a zone that offers the type (DescribeInstanceTypeOfferings), an
    Availability Zone, preferably one EKS allows cluster subnets in (the first by name); None when none offers it."""
    usable = sorted((z for z in zones if z.name in set(offered) and z.zone_type == AVAILABILITY_ZONE
                     and z.state != "unavailable"), key=lambda z: (not z.eks_cluster_subnets_allowed, z.name))
    return usable[0].name if usable else None
