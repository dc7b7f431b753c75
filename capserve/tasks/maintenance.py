"""What the scheduled maintenance (the reaper, the Hub watcher) asks before it looks: whether this worker has AWS
credentials at all, and in which regions the campaigns of the records actually are.

A worker without AWS credentials (a team's server playing the sandbox, a laptop's worker) cannot read a record or
list a tag: the run there ends Completed with one line saying it skipped, in its state message and in an artifact,
rather than failing every few minutes for something that is not the operator's fault (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import State
from prefect.states import Completed

from capserve.core.settings import RecordSettings
from capserve.tasks.aws import session
from capserve.tasks.hub_watch import list_campaign_records
from capserve.tasks.locations import locate_records

NO_AWS_CREDENTIALS = "skipped: no AWS credentials on this worker"


def aws_credentials_here() -> bool:
    """Whether botocore's credential chain (environment, shared files, SSO, container or instance role) finds
    credentials in this process. It asks no AWS service: credentials found but refused still fail loudly later."""
    return session().get_credentials() is not None


def skipped_without_aws(flow: str, artifact_key: str, data: Any) -> State | None:
    """None when this worker has AWS credentials; else the Completed state ``flow`` ends in (``data`` its result),
    after one log line and a markdown artifact that say so in the UI."""
    if aws_credentials_here():
        return None
    why = (f"{flow}: {NO_AWS_CREDENTIALS} (boto3 found none in the environment, the shared files or an instance "
           "role); give the worker AWS credentials for it to look, or pause this deployment's schedule")
    get_run_logger().info(why)
    create_markdown_artifact(key=artifact_key, markdown=f"# {flow}\n\n{why}\n", description=f"{flow}: skipped")
    return Completed(message=NO_AWS_CREDENTIALS, data=data)


def regions_of_records(home_regions: Iterable[str], records: RecordSettings) -> list[str]:
    """``home_regions`` (where records live), then each recorded campaign's lease region: where its resources
    are, which need not be its home region."""
    homes = list(dict.fromkeys(home_regions))
    leased = [r.lease.region for home in homes for r in list_campaign_records(locate_records(home, records))
              if r.lease is not None]
    return list(dict.fromkeys([*homes, *leased]))
