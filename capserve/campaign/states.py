"""A campaign run's final Prefect state, from its report (what a person filters on in the UI)."""

from __future__ import annotations

from prefect.client.schemas.objects import State
from prefect.runtime import deployment
from prefect.states import Completed, Failed

from capserve.core.report import CampaignReport


def verdict_state(report: CampaignReport) -> CampaignReport | State:
    """A deployment run's final state says the verdict: fail → Failed, invalid → Completed "Inconclusive".

    Custom state names become event names (docs/prefect.md §12): automations match on the state type.
    Called in-process (the CLI, tests), the report comes back as it is; the CLI maps the verdict to its
    exit code.
    """
    if deployment.get_id() is None or report.evaluation is None:
        return report
    verdict = report.evaluation.verdict
    if verdict == "fail":
        return Failed(message=f"campaign {report.campaign}: evaluation verdict FAIL", data=report)
    if verdict == "invalid":
        return Completed(name="Inconclusive", message="evaluation was invalid: the client, not the endpoint",
                         data=report)
    return report
