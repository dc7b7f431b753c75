"""The evaluation result: per-profile outcomes, gates and the verdict, as report.json and markdown."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.evaluation.client_limits import lag_allowance_ms
from capserve.core.evaluation.metrics import LoadMetrics, Slo, compute_metrics
from capserve.core.evaluation.records import CLIENT_ERROR_KINDS, ClientStats, RunRecord
from capserve.core.evaluation.smoke import SmokeCheck
from capserve.core.evaluation.spec import EvaluationSpec, GateSpec, LoadSpec

Verdict = Literal["pass", "fail", "invalid"]


class SmokeResult(BaseModel):
    """All smoke checks; a failed check never stops the others."""

    model_config = ConfigDict(extra="forbid")
    checks: list[SmokeCheck] = Field(default_factory=list, description="One entry per check, in order.")
    unreachable: str | None = Field(
        default=None,
        description="Set when health and models both got no answer at all: the later checks and profiles are not "
        "run (each would only wait out its timeout).",
    )

    @property
    def failed(self) -> list[SmokeCheck]:
        return [c for c in self.checks if c.status == "failed"]

    @property
    def not_run(self) -> list[SmokeCheck]:
        return [c for c in self.checks if c.status == "not_run"]

    @property
    def saw_thinking(self) -> bool:
        """Whether a streamed check carried thinking: the endpoint serves a model that thinks."""
        return any(c.thinking for c in self.checks)


class QualityItemResult(BaseModel):
    """One golden item's outcome."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="Golden item id.")
    category: str = Field(description="Golden item category.")
    correct: bool = Field(description="Exact match after extraction.")
    extracted: str | None = Field(default=None, description="What the extractor found.")
    expected: str = Field(description="Expected answer.")
    error: str | None = Field(default=None, description="Request failure, if any (scored as wrong).")


class QualityResult(BaseModel):
    """Exact-match accuracy on the golden set with a Wilson interval."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="'packaged' or the golden file path.")
    total: int = Field(ge=0, description="Items scored.")
    correct: int = Field(ge=0, description="Items answered correctly.")
    accuracy: float = Field(ge=0, le=1, description="correct ÷ total.")
    ci_low: float = Field(ge=0, le=1, description="Lower bound of the confidence interval.")
    ci_high: float = Field(ge=0, le=1, description="Upper bound of the confidence interval.")
    confidence: float = Field(gt=0, lt=1, description="Confidence level of the interval.")
    by_category: dict[str, float] = Field(default_factory=dict, description="Accuracy per category.")
    errors: int = Field(default=0, ge=0, description="Items whose request failed.")
    not_asked: int = Field(
        default=0, ge=0, description="Items not asked because the evaluation's deadline passed (not scored)."
    )
    items: list[QualityItemResult] = Field(default_factory=list, description="Per-item outcomes.")


class LoadPointResult(BaseModel):
    """One load run's metrics and whether the client could be trusted."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Run label, e.g. c8 or rate4.")
    mode: Literal["closed", "open"] = Field(description="closed = fixed concurrency; open = Poisson.")
    concurrency: int | None = Field(default=None, description="Closed loop: streams in flight.")
    request_rate: float | None = Field(default=None, description="Open loop: target requests/s.")
    metrics: LoadMetrics = Field(description="vLLM-bench-named metrics.")
    client: ClientStats = Field(description="The generator's self-measurement.")
    valid: bool = Field(description="False when the client, not the server, was the bottleneck.")
    invalid_reasons: list[str] = Field(default_factory=list, description="Why the run is invalid.")
    ran: bool = Field(default=True, description="False when the run was refused before it started.")
    lag_allowance_ms: float | None = Field(
        default=None, description="Client event-loop lag p99 above which the run is invalid (client_limits)."
    )
    errors: dict[str, int] = Field(default_factory=dict, description="Failed requests by kind.")
    raw_path: str | None = Field(default=None, description="JSON file with the raw request records.")


class LoadResult(BaseModel):
    """All load runs."""

    model_config = ConfigDict(extra="forbid")
    points: list[LoadPointResult] = Field(default_factory=list, description="One per level/rate.")


class GateResult(BaseModel):
    """One gate: measured value vs threshold. passed is None when the gate could not be judged."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Gate name, with the load run it applies to.")
    value: float | None = Field(description="Measured value.")
    threshold: float = Field(description="Threshold it is compared with.")
    passed: bool | None = Field(description="True/False; None = not judged (invalid run or no data).")
    note: str = Field(default="", description="Why, when not obvious.")


class EvaluationResult(BaseModel):
    """The evaluate stage's outcome: saved as JSON, summarised into report.json and markdown."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="Endpoint base URL (no credentials).")
    model: str = Field(description="Served model name.")
    profiles: list[str] = Field(description="Profiles that were run.")
    verdict: Verdict = Field(description="pass, fail, or invalid (a saturated client; nothing failed).")
    gates: list[GateResult] = Field(default_factory=list, description="Every gate judged.")
    smoke: SmokeResult | None = Field(default=None, description="Smoke outcome, if run.")
    quality: QualityResult | None = Field(default=None, description="Quality outcome, if run.")
    load: LoadResult | None = Field(default=None, description="Load outcome, if run.")
    plots: list[str] = Field(default_factory=list, description="PNG files (paths).")
    notes: list[str] = Field(default_factory=list, description="Remarks a reader needs, e.g. a stand-in endpoint.")
    not_judged: list[str] = Field(
        default_factory=list,
        description="What could not be judged and why (deadline passed, load the client could not drive).",
    )

    def report_section(self) -> dict[str, Any]:
        """The report.json ``evaluation`` object."""
        quality = None
        if self.quality is not None:
            quality = self.quality.model_dump(mode="json", exclude={"items"})
        load = None
        if self.load is not None:
            load = [p.model_dump(mode="json") for p in self.load.points]
        return {
            "verdict": self.verdict,
            "gates": [g.model_dump(mode="json") for g in self.gates],
            "smoke": self.smoke.model_dump(mode="json")["checks"] if self.smoke is not None else None,
            "quality": quality,
            "load": load,
            "plots": list(self.plots),
            "notes": list(self.notes),
            "not_judged": list(self.not_judged),
            "url": self.url,
            "model": self.model,
        }

    def markdown(self) -> str:
        """A human summary for the report and the Prefect artifact."""
        lines = [f"## Evaluation of `{self.model}` — verdict: **{self.verdict.upper()}**", ""]
        lines += [f"> {note}" for note in self.notes] + ([""] if self.notes else [])
        if self.not_judged:
            lines += ["Not judged:", ""] + [f"- {why}" for why in self.not_judged] + [""]
        lines += ["| gate | value | threshold | result |", "|---|---|---|---|"]
        for gate in self.gates:
            shown = "—" if gate.value is None else f"{gate.value:.4g}"
            mark = {True: "pass", False: "**FAIL**", None: "not judged"}[gate.passed]
            lines.append(f"| {gate.name} | {shown} | {gate.threshold:.4g} | {mark} {gate.note} |")
        if self.smoke is not None:
            lines += ["", "### Smoke", "", "| check | status | detail |", "|---|---|---|"]
            lines += [f"| {c.name} | {c.status} | {c.detail.replace('|', '/')[:160]} |" for c in self.smoke.checks]
        if self.quality is not None:
            q = self.quality
            lines += [
                "",
                "### Quality",
                "",
                f"{q.correct}/{q.total} exact match = {q.accuracy:.1%} "
                f"({q.confidence:.0%} CI {q.ci_low:.1%}–{q.ci_high:.1%}); "
                + ", ".join(f"{k} {v:.0%}" for k, v in sorted(q.by_category.items())),
            ]
        if self.load is not None:
            lines += ["", "### Load", "", load_table_header()]
            lines += ["|" + "---|" * 12]
            lines += [load_table_row(p) for p in self.load.points]
        if self.plots:
            lines += ["", "Plots: " + ", ".join(f"`{p}`" for p in self.plots)]
        return "\n".join(lines) + "\n"


def load_table_header() -> str:
    return (
        "| run | ok/failed | req/s | out tok/s | goodput frac | TTFT p50/p95 ms | first answer p50/p95 ms "
        "| TPOT p50/p95 ms "
        "| ITL p95 ms | E2EL p95 ms | client CPU % | valid |"
    )


def load_table_row(p: LoadPointResult) -> str:
    m = p.metrics
    goodput = "—" if m.goodput_fraction is None else f"{m.goodput_fraction:.2f}"
    valid = "yes" if p.valid else "NO: " + "; ".join(p.invalid_reasons)
    fa = m.first_answer_ms
    # A reasoning model's first token is thinking; its answer may start later or, within a short
    # max_tokens, not at all (then "none", with how many requests did answer when some did).
    answer = "none" if fa.count == 0 else f"{fa.p50:.1f}/{fa.p95:.1f}"
    if 0 < fa.count < m.completed:
        answer += f" ({fa.count} of {m.completed})"
    return (
        f"| {p.name} | {m.completed}/{m.failed} | {m.request_throughput:.2f} | {m.output_throughput:.1f} | {goodput} "
        f"| {m.ttft_ms.p50:.1f}/{m.ttft_ms.p95:.1f} | {answer} | {m.tpot_ms.p50:.2f}/{m.tpot_ms.p95:.2f} "
        f"| {m.itl_ms.p95:.2f} | {m.e2el_ms.p95:.1f} | {p.client.cpu_percent:.0f} | {valid} |"
    )


def slo_from_gates(gates: GateSpec) -> Slo:
    return Slo(ttft_ms=gates.slo_ttft_ms, tpot_ms=gates.slo_tpot_ms, e2el_ms=gates.slo_e2el_ms)


def summarize_run(run: RunRecord, spec: LoadSpec, gates: GateSpec, raw_path: str | None = None) -> LoadPointResult:
    """Metrics plus the client-validity judgement of one run (client_limits explains the rules)."""
    reasons = []
    c = run.client
    allowance = lag_allowance_ms(spec, gates)
    if c.loop_lag_p99_ms > allowance:
        reasons.append(
            f"client event-loop lag p99 {c.loop_lag_p99_ms:.1f} ms > {allowance:g} ms allowed "
            "(the client's own delays could move a gated latency)"
        )
    if run.mode == "open" and c.dispatch_delay_p95_ms > spec.max_dispatch_delay_p95_ms:
        reasons.append(
            f"client dispatch delay p95 {c.dispatch_delay_p95_ms:.1f} ms > {spec.max_dispatch_delay_p95_ms:g} ms"
        )
    if c.cpu_percent > spec.max_client_cpu_percent:
        reasons.append(f"client CPU {c.cpu_percent:.0f}% > {spec.max_client_cpu_percent:g}%")
    # A saturated client times requests out on its own: those timeouts are not the endpoint's.
    client_kinds = CLIENT_ERROR_KINDS | ({"timeout"} if reasons else frozenset())
    errors: dict[str, int] = {}
    client_errors: dict[str, int] = {}
    for record in run.requests:
        if not record.success:
            kind = record.error_kind or "client"
            errors[kind] = errors.get(kind, 0) + 1
            if kind in client_kinds:
                client_errors[kind] = client_errors.get(kind, 0) + 1
    if client_errors:
        shown = ", ".join(f"{n} {kind}" for kind, n in sorted(client_errors.items()))
        reasons.append(f"{sum(client_errors.values())} requests failed on the client side ({shown}); "
                       "not counted against the endpoint")
    return LoadPointResult(
        name=run.name,
        mode=run.mode,
        concurrency=run.concurrency,
        request_rate=run.request_rate,
        metrics=compute_metrics(run, slo_from_gates(gates), client_kinds),
        client=run.client,
        valid=not reasons,
        invalid_reasons=reasons,
        errors=errors,
        raw_path=raw_path,
        lag_allowance_ms=allowance,
    )


def refused_point(name: str, *, concurrency: int | None, rate: float | None, reason: str) -> LoadPointResult:
    """A run the client could not drive (or no time was left for): invalid, never run, nothing blamed."""
    empty = RunRecord(
        name=name,
        mode="closed" if concurrency is not None else "open",
        concurrency=concurrency,
        request_rate=rate,
        start=0.0,
        end=0.0,
        client=ClientStats(
            processes=1, cpu_percent=0, loop_lag_p99_ms=0, loop_lag_max_ms=0, dispatch_delay_p95_ms=0, uvloop=False
        ),
    )
    return LoadPointResult(
        name=name,
        mode=empty.mode,
        concurrency=concurrency,
        request_rate=rate,
        metrics=compute_metrics(empty),
        client=empty.client,
        valid=False,
        invalid_reasons=[f"not run: {reason}"],
        ran=False,
    )


def _gate(name: str, value: float | None, threshold: float, ok: bool | None, note: str = "") -> GateResult:
    return GateResult(name=name, value=value, threshold=threshold, passed=ok, note=note)


def evaluate_gates(
    spec: EvaluationSpec,
    smoke: SmokeResult | None,
    quality: QualityResult | None,
    load: LoadResult | None,
    baseline: EvaluationResult | None = None,
    not_run: list[str] | None = None,
) -> tuple[list[GateResult], Verdict]:
    """Judge every configured gate. The verdict is fail if any judged gate failed; else invalid if
    anything could not be judged — a load run the client could not drive or measure, checks, items
    or profiles the deadline cut off (``not_run``) — since nothing is blamed on the endpoint without
    evidence; else pass."""
    g = spec.gates
    gates: list[GateResult] = []
    incomplete = bool(not_run)
    if smoke is not None and g.smoke_must_pass:
        failed = len(smoke.failed)
        names = ", ".join(c.name for c in smoke.failed)
        gates.append(_gate("smoke_failed_checks", failed, 0, failed == 0, names))
        incomplete |= bool(smoke.not_run)
    if quality is not None and quality.not_asked:
        incomplete = True
        note = f"deadline passed: {quality.not_asked} of {quality.total + quality.not_asked} items not asked"
        if g.quality_floor is not None:
            gates.append(_gate("quality_accuracy", quality.accuracy, g.quality_floor, None, note))
    elif quality is not None:
        if g.quality_floor is not None:
            gates.append(
                _gate("quality_accuracy", quality.accuracy, g.quality_floor, quality.accuracy >= g.quality_floor)
            )
        if baseline is not None and baseline.quality is not None and baseline.quality.total > 0:
            drop = baseline.quality.accuracy - quality.accuracy
            # Regression only when the drop exceeds our own interval's upper half-width plus the allowance.
            allowed = (quality.ci_high - quality.accuracy) + g.quality_regression_allowance
            gates.append(
                _gate(
                    "quality_drop_vs_baseline",
                    drop,
                    allowed,
                    drop <= allowed,
                    f"baseline {baseline.quality.accuracy:.3f}",
                )
            )
    any_invalid = False
    if load is not None:
        for point in load.points:
            any_invalid |= not point.valid
            gates += _load_gates(g, point)
    judged_fail = any(gate.passed is False for gate in gates)
    verdict: Verdict = "fail" if judged_fail else ("invalid" if any_invalid or incomplete else "pass")
    return gates, verdict


def _load_gates(g: GateSpec, point: LoadPointResult) -> list[GateResult]:
    m = point.metrics
    if not point.ran:
        return [_gate(f"load@{point.name}", None, 0, None, "; ".join(point.invalid_reasons))]
    note = "" if point.valid else "run invalid: " + "; ".join(point.invalid_reasons)
    out: list[GateResult] = []

    def judge(name: str, value: float | None, threshold: float, higher_is_better: bool, has_data: bool) -> None:
        if not point.valid or not has_data or value is None:
            out.append(_gate(f"{name}@{point.name}", value, threshold, None, note or "no successful requests"))
            return
        ok = value >= threshold if higher_is_better else value <= threshold
        out.append(_gate(f"{name}@{point.name}", value, threshold, ok))

    has_ok = m.completed > 0
    if g.max_error_rate is not None:
        # Judged even on an invalid run: its error rate counts only failures the endpoint caused (an
        # HTTP 503 or a broken stream is the server's answer however slow the client was).
        out.append(_gate(f"error_rate@{point.name}", m.error_rate, g.max_error_rate, m.error_rate <= g.max_error_rate))
    if g.p95_ttft_ms is not None:
        judge("p95_ttft_ms", m.ttft_ms.p95, g.p95_ttft_ms, False, has_ok)
    if g.p95_tpot_ms is not None:
        judge("p95_tpot_ms", m.tpot_ms.p95, g.p95_tpot_ms, False, m.tpot_ms.count > 0)
    if g.min_goodput_fraction is not None and m.goodput_fraction is not None:
        judge("goodput_fraction", m.goodput_fraction, g.min_goodput_fraction, True, has_ok)
    return out
