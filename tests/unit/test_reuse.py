"""When a re-run may skip a stage: same inputs as its last completed run, with outputs recorded."""

from __future__ import annotations

from datetime import UTC, datetime

from capserve.core.record import StageEntry
from capserve.core.reuse import unchanged_since
from capserve.core.stages import StageStatus

T0 = datetime(2026, 12, 1, 5, 20, 11, 123456, tzinfo=UTC)
DIGEST = "d" * 64


def entry(**changes: object) -> StageEntry:
    base: dict[str, object] = {
        "status": StageStatus.COMPLETED, "started_at": T0, "ended_at": T0, "inputs_digest": DIGEST,
        "outputs": {"manifest_uri": "s3://b/k"},
    }
    return StageEntry.model_validate({**base, **changes})


def test_unchanged_and_completed_is_skipped_saying_since_when() -> None:
    assert unchanged_since(entry(), DIGEST) == "skipped: unchanged since 2026-12-01T05:20:11+00:00"


def test_anything_else_runs() -> None:
    assert unchanged_since(None, DIGEST) is None
    assert unchanged_since(entry(), "e" * 64) is None  # an input changed
    for status in (StageStatus.FAILED, StageStatus.RUNNING, StageStatus.SKIPPED, StageStatus.INTERRUPTED):
        assert unchanged_since(entry(status=status), DIGEST) is None
    assert unchanged_since(entry(outputs={}), DIGEST) is None  # nothing to rebuild the result from
    assert unchanged_since(entry(inputs_digest=None), DIGEST) is None
