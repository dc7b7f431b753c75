"""Flow runs a person can find in the UI: every run of a campaign is tagged with the campaign
(``capserve.io/campaign=<id>``) and every stage subflow is named ``<stage>-<campaign id>``, like the top-level
runs (``campaign-<id>``, ``serve-<id>``, ``teardown-<id>``).

Prefect gives a subflow run the tags of the ``tags()`` context it is called in, and names it with the flow's
``flow_run_name`` (a template or a callable) just before it runs:
https://docs.prefect.io/v3/how-to-guides/workflows/custom-metadata ("Customize run names") and
https://docs.prefect.io/v3/api-ref/python/prefect-context (``tags``). A run's own tags are set when it is created,
by whoever creates it, so ``campaign_runs`` also adds the tag to the run it is entered in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prefect import tags
from prefect.context import FlowRunContext
from prefect.utilities.names import generate_slug

from capserve.core.orphans import campaign_in_parameters
from capserve.core.schedule import campaign_tag
from capserve.tasks.scheduling import tag_this_run


@contextmanager
def campaign_runs(campaign_id: str) -> Iterator[None]:
    """Tag the current run and every flow and task run started inside with the campaign's tag."""
    tag = campaign_tag(campaign_id)
    tag_this_run(tag)
    with tags(tag):
        yield


def stage_run_name(stage: str) -> Callable[[], str]:
    """A ``flow_run_name`` for a stage subflow: ``<stage>-<campaign id>``, the campaign taken from the run's tags
    (``campaign_runs``), else from its parameters (a ``spec``, a rollout's ``inputs.spec``, a ``campaign_id``);
    a run of no campaign gets Prefect's usual random slug after the stage."""

    def name() -> str:
        campaign = _campaign_of_this_run()
        return f"{stage}-{campaign}" if campaign else f"{stage}-{generate_slug(2)}"

    return name


def _campaign_of_this_run() -> str | None:
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return None
    tagged = campaign_in_parameters({}, list(context.flow_run.tags))
    if tagged:
        return tagged
    parameters = context.parameters or {}
    for spec in (parameters.get("spec"), getattr(parameters.get("inputs"), "spec", None)):
        campaign = getattr(spec, "campaign_id", None)
        if isinstance(campaign, str) and campaign:
            return campaign
    value = parameters.get("campaign_id")
    return value if isinstance(value, str) and value else None
