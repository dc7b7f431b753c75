"""The evaluate stage: smoke, quality and load profiles against an OpenAI-compatible URL, then a verdict.

Usable alone (``capserve eval``) and as a campaign stage. Before traffic (the campaign's evaluate stage, a
redeploy's gate before promote) only the gate runs, ``GATE_PROFILES``, within ``spec.gate_budget_minutes``: the
long load profile would hold back serving and judge it on a saturation test it does not need to pass to serve.
The load profile runs on demand (``capserve eval --profile load``), reported apart (docs/evaluation.md §8).
Each profile is a task; a failing profile
is recorded and the others still run. The whole evaluation runs against one deadline
(``spec.timeout_s``): what is still pending when it passes is reported as not judged (verdict
invalid, never fail). When the endpoint does not answer at all (health and models both time out or
cannot connect), quality and load are not attempted.

Credentials never travel as flow parameters: the tasks read the API key (``api_key_env``) or URL
credentials (``basic_auth_env``) from the environment variables named, register them for redaction,
and the result is redacted once more before it is written or published.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, get_run_logger

from capserve.campaign.run_names import stage_run_name
from capserve.core.catalog.models import Thinking
from capserve.core.errors import SpecError
from capserve.core.evaluation.quality import thinking_off_request
from capserve.core.evaluation.result import EvaluationResult, LoadResult, QualityResult, SmokeResult, evaluate_gates
from capserve.core.evaluation.spec import EvaluationSpec
from capserve.core.urls import has_hidden_parts, public_url
from capserve.tasks.evaluation.control import run_quality, run_smoke
from capserve.tasks.evaluation.load import run_load
from capserve.tasks.evaluation.publish import make_plots, publish
from capserve.tasks.secrets import install_log_redaction, redactor, register_secret_environment

PROFILES = ("smoke", "quality", "load")
GATE_PROFILES = ("smoke", "quality")
"""What runs before traffic: an endpoint that passes these is declared serving (docs/evaluation.md §8)."""

__all__ = ["GATE_PROFILES", "PROFILES", "evaluate_endpoint", "public_url"]


@flow(name="evaluate-endpoint", flow_run_name=stage_run_name("evaluate-endpoint"))
def evaluate_endpoint(
    url: str,
    model: str,
    spec: EvaluationSpec,
    *,
    profiles: Sequence[str] = PROFILES,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    out_dir: Path,
    baseline: EvaluationResult | None = None,
    notes: Sequence[str] = (),
    thinking: Thinking | None = None,
    campaign: str | None = None,
) -> EvaluationResult:
    """Run the chosen profiles, judge the gates, save ``out_dir/evaluation.json``, publish artifacts and plots.

    ``campaign`` (a campaign's evaluation) leads the artifacts' keys, so one campaign's never replace another's.

    ``thinking`` is the catalog's word on how the served model thinks (None: unknown or it does not);
    the smoke stream's evidence counts too (docs/evaluation.md §6.4).
    """
    _check_inputs(url, profiles, api_key_env, basic_auth_env)
    if "quality" in profiles and spec.quality.thinking == "off" and thinking is not None:
        thinking_off_request(thinking)  # a SpecError before anything runs when it cannot be turned off
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    smoke, quality, load, not_run = _run_profiles(
        url, model, spec, profiles, api_key_env, basic_auth_env, out_dir, thinking
    )
    gates, verdict = evaluate_gates(spec, smoke, quality, load, baseline, not_run)
    plots = make_plots(load, out_dir) if load is not None and any(p.ran for p in load.points) else []
    result = EvaluationResult(
        url=public_url(url),
        model=model,
        profiles=[p for p in PROFILES if p in profiles],
        verdict=verdict,
        gates=gates,
        smoke=smoke,
        quality=quality,
        load=load,
        plots=plots,
        notes=list(notes),
        not_judged=not_run + _not_judged(smoke, quality, load),
    )
    # Belt and braces: whatever a task let through is redacted before it is written or published.
    result = EvaluationResult.model_validate(redactor().redact_data(result.model_dump(mode="json")))
    publish(result, out_dir, campaign)
    get_run_logger().info(
        "evaluation of %s: %s (%d gates, %d failed)",
        model,
        verdict.upper(),
        len(gates),
        sum(g.passed is False for g in gates),
    )
    return result


def _check_inputs(url: str, profiles: Sequence[str], api_key_env: str | None, basic_auth_env: str | None) -> None:
    """Redaction on for this process (a worker's run has no CLI to do it), then refuse what is malformed."""
    install_log_redaction()
    register_secret_environment()
    register_secret_environment([api_key_env, basic_auth_env])
    unknown = sorted(set(profiles) - set(PROFILES))
    if unknown:
        raise SpecError(f"unknown profiles {unknown}; choose from {list(PROFILES)}")
    if has_hidden_parts(url):
        raise SpecError(
            "the endpoint URL carries credentials, a query or a fragment; pass the public base URL and the "
            "credentials by environment (basic_auth_env / api_key_env)"
        )


def _run_profiles(
    url: str,
    model: str,
    spec: EvaluationSpec,
    profiles: Sequence[str],
    api_key_env: str | None,
    basic_auth_env: str | None,
    out_dir: Path,
    thinking: Thinking | None = None,
) -> tuple[SmokeResult | None, QualityResult | None, LoadResult | None, list[str]]:
    """Each chosen profile within what is left of ``spec.timeout_s``, smoke and quality (the gate before traffic)
    also within ``spec.gate_budget_minutes``; and what was not run, and why."""
    started = time.monotonic()
    deadline = started + spec.timeout_s
    gate_deadline = min(deadline, started + spec.gate_budget_minutes * 60)

    def left() -> float:
        return max(0.0, deadline - time.monotonic())

    def gate_left() -> float:
        return max(0.0, gate_deadline - time.monotonic())

    smoke: SmokeResult | None = None
    quality: QualityResult | None = None
    load: LoadResult | None = None
    not_run: list[str] = []
    if "smoke" in profiles:
        smoke = run_smoke(url, model, spec, api_key_env, basic_auth_env, gate_left())
    for name in ("quality", "load"):
        if name not in profiles:
            continue
        if smoke is not None and smoke.unreachable:
            not_run.append(f"{name}: not run, the endpoint did not answer the smoke checks")
        elif left() <= 0:
            not_run.append(f"{name}: not run, the evaluation's deadline ({spec.timeout_s:g} s) had passed")
        elif name == "quality" and gate_left() <= 0:
            not_run.append(f"quality: not run, the gate's budget ({spec.gate_budget_minutes} min) had passed")
        elif name == "quality":
            thinks = smoke is not None and smoke.saw_thinking
            quality = run_quality(url, model, spec, api_key_env, basic_auth_env, gate_left(), thinks, thinking)
        else:
            load = run_load(url, model, spec.load, spec.gates, out_dir, api_key_env, basic_auth_env, left())
    return smoke, quality, load, not_run


def _not_judged(smoke: SmokeResult | None, quality: QualityResult | None, load: LoadResult | None) -> list[str]:
    found = []
    if smoke is not None:
        found += [f"smoke {c.name}: {c.detail}" for c in smoke.not_run]
    if quality is not None and quality.not_asked:
        found.append(f"quality: {quality.not_asked} golden items not asked (the deadline passed)")
    if load is not None:
        found += [f"load {p.name}: {'; '.join(p.invalid_reasons)}" for p in load.points if not p.valid]
    return found
