"""The evaluate stage: smoke, quality and load profiles against an OpenAI-compatible URL, then a verdict.

Usable alone (``capserve eval``) and as a campaign stage. Each profile is a task; a failing profile
is recorded and the others still run. The API key is read by the tasks from the environment
variable named by ``api_key_env``, so it never becomes a flow parameter, a log line or a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from prefect import flow, get_run_logger

from capserve.core.evaluation.result import EvaluationResult, LoadResult, QualityResult, SmokeResult, evaluate_gates
from capserve.core.evaluation.spec import EvaluationSpec
from capserve.tasks.evaluation.control import run_quality, run_smoke
from capserve.tasks.evaluation.load import run_load
from capserve.tasks.evaluation.publish import make_plots, publish

PROFILES = ("smoke", "quality", "load")


def public_url(url: str) -> str:
    """The URL without user-info, query or fragment (where credentials sometimes hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@flow(name="evaluate-endpoint")
def evaluate_endpoint(
    url: str,
    model: str,
    spec: EvaluationSpec,
    *,
    profiles: Sequence[str] = PROFILES,
    api_key_env: str | None = None,
    out_dir: Path,
    baseline: EvaluationResult | None = None,
    notes: Sequence[str] = (),
) -> EvaluationResult:
    """Run the chosen profiles, judge the gates, save ``out_dir/evaluation.json``, publish artifacts and plots."""
    unknown = sorted(set(profiles) - set(PROFILES))
    if unknown:
        raise ValueError(f"unknown profiles {unknown}; choose from {list(PROFILES)}")
    logger = get_run_logger()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    smoke: SmokeResult | None = None
    quality: QualityResult | None = None
    load: LoadResult | None = None
    if "smoke" in profiles:
        smoke = run_smoke(url, model, spec, api_key_env)
    if "quality" in profiles:
        quality = run_quality(url, model, spec, api_key_env)
    if "load" in profiles:
        load = run_load(url, model, spec.load, spec.gates, out_dir, api_key_env)
    gates, verdict = evaluate_gates(spec, smoke, quality, load, baseline)
    plots = make_plots(load, out_dir) if load is not None and load.points else []
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
    )
    publish(result, out_dir)
    logger.info(
        "evaluation of %s: %s (%d gates, %d failed)",
        model,
        verdict.upper(),
        len(gates),
        sum(g.passed is False for g in gates),
    )
    return result
