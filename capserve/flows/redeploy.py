"""Redeploy a running campaign on a new model revision (the target of the revision-published automation).

Not yet: staging, rolling out, evaluating and promoting or rolling back a revision needs the rollout stage
(issue 9), which is not in this tree yet. Until it is, the flow refuses every run with one clear message,
so an automation that fires shows a Failed run saying why, instead of doing half a redeploy
(docs/events.md §4).
"""

from __future__ import annotations

from prefect import flow

from capserve.core.errors import PermanentError


@flow(name="redeploy", validate_parameters=True)
def redeploy(campaign_id: str, revision: str, trigger: str = "manual", region: str | None = None) -> None:
    """Refuse: a redeploy needs the rollout stage."""
    raise PermanentError(
        f"redeploy of campaign {campaign_id} to revision {revision} ({trigger}) is not available yet: it needs "
        "the rollout stage (issue 9). The campaign keeps serving its pinned revision; run the campaign again "
        "with model.revision set to the new commit to move it by hand"
    )
