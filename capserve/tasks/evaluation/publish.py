"""Publishing: the result JSON, the plots and the Prefect artifacts (a table per profile + a summary)."""

from __future__ import annotations

from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from capserve.core.artifact_keys import artifact_key
from capserve.core.evaluation.result import EvaluationResult, LoadResult
from capserve.tasks.evaluation.load import load_raw
from capserve.tasks.evaluation.plots import latency_cdfs, throughput_vs_concurrency
from capserve.tasks.resilience import local_task


@local_task(name="eval-plots")
def make_plots(load: LoadResult, out_dir: Path) -> list[str]:
    """Latency CDFs for every run and throughput vs concurrency when there are closed-loop runs."""
    runs = [load_raw(p.raw_path) for p in load.points if p.raw_path]
    paths = [latency_cdfs(runs, out_dir / "latency-cdf.png")]
    if any(p.mode == "closed" for p in load.points):
        paths.append(throughput_vs_concurrency(load, out_dir / "throughput-vs-concurrency.png"))
    return [str(p) for p in paths]


def eval_key(campaign: str | None, model: str, suffix: str) -> str:
    """``<campaign>-eval-<model>-<suffix>``: campaigns evaluating the same model keep their own
    (``eval-<model>-<suffix>`` for an evaluation outside a campaign, ``capserve eval``)."""
    return artifact_key(campaign, "eval", model[:40], suffix)


@local_task(name="eval-publish")
def publish(result: EvaluationResult, out_dir: Path, campaign: str | None = None) -> Path:
    """Write evaluation.json and create the artifacts (keyed by ``campaign`` when it is one's)."""
    path = out_dir / "evaluation.json"
    path.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    create_markdown_artifact(
        result.markdown(),
        key=eval_key(campaign, result.model, "summary"),
        description=f"Evaluation verdict: {result.verdict}",
    )
    create_table_artifact(
        [g.model_dump(mode="json") for g in result.gates],
        key=eval_key(campaign, result.model, "gates"),
        description="Gates: value vs threshold",
    )
    if result.smoke is not None:
        create_table_artifact(
            [c.model_dump(mode="json") for c in result.smoke.checks],
            key=eval_key(campaign, result.model, "smoke"),
            description="Smoke checks",
        )
    if result.quality is not None:
        rows = [{"category": k, "accuracy": v} for k, v in sorted(result.quality.by_category.items())]
        rows.append({"category": "all", "accuracy": result.quality.accuracy})
        create_table_artifact(rows, key=eval_key(campaign, result.model, "quality"), description="Golden-set accuracy")
    if result.load is not None:
        rows = [
            {
                "run": p.name,
                "completed": p.metrics.completed,
                "failed": p.metrics.failed,
                "req_per_s": round(p.metrics.request_throughput, 3),
                "out_tok_per_s": round(p.metrics.output_throughput, 1),
                "ttft_p95_ms": round(p.metrics.ttft_ms.p95, 2),
                "tpot_p95_ms": round(p.metrics.tpot_ms.p95, 3),
                "itl_p95_ms": round(p.metrics.itl_ms.p95, 3),
                "valid": p.valid,
            }
            for p in result.load.points
        ]
        create_table_artifact(rows, key=eval_key(campaign, result.model, "load"), description="Load runs")
    return path
