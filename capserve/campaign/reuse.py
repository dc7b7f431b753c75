"""Re-runs skip what has not changed: a stage whose inputs digest matches its last completed run, and whose
outputs still verify with cheap read-only calls, is skipped, its result rebuilt from the record.

The rule (``capserve.core.reuse.unchanged_since``) is pure; each reusable stage names here how its outputs
are verified and its result rebuilt. Stages without an entry always run (they converge on their own:
acquire adopts, bring-up finds by tag).

- stage_weights: the manifest recorded for the same (repo, sha, layout) must still be in S3 with every file
  it lists, of the same size and SHA256 (HEAD requests): then nothing is downloaded or uploaded.
"""

from __future__ import annotations

from collections.abc import Callable

from prefect import get_run_logger
from pydantic import BaseModel, ValidationError

from capserve.campaign.context import CampaignContext
from capserve.core.record import StageEntry
from capserve.core.reuse import unchanged_since
from capserve.core.stages import Stage
from capserve.core.weights.result import WeightsResult
from capserve.tasks.the_clock import clock
from capserve.tasks.weights.s3 import verify_published

Verifier = Callable[[CampaignContext, StageEntry], BaseModel | None]


def verified_weights(ctx: CampaignContext, previous: StageEntry) -> WeightsResult | None:
    """The weights result of the last run, when its published checkpoint still verifies in S3."""
    try:
        result = WeightsResult.model_validate({**previous.outputs, "downloaded_bytes": 0, "uploaded_bytes": 0})
    except ValidationError:
        return None  # recorded by an older version with fewer outputs: run the stage
    problems = verify_published(result.manifest_uri, ctx.locations.weights.region)
    if problems:
        get_run_logger().info("stage_weights runs again: %s", "; ".join(problems[:5]))
        return None
    return result


REUSABLE: dict[Stage, Verifier] = {Stage.STAGE_WEIGHTS: verified_weights}


def reuse_unchanged(ctx: CampaignContext, stage: Stage, digest: str) -> bool:
    """Skip ``stage`` when it is unchanged and verifies: its line says so, its result goes into the report, and
    its record entry stays the one of the run that did the work. False: run it."""
    verify = REUSABLE.get(stage)
    previous = ctx.record.stage(stage)
    why = unchanged_since(previous, digest)
    if verify is None or why is None or previous is None:
        return False
    result = verify(ctx, previous)
    if result is None:
        return False
    get_run_logger().info("%s %s", stage.value, why)
    ctx.report.skip(stage, why, clock().now())
    ctx.report.add(result)
    return True
