"""Ask IAM whether the caller may make every AWS call the campaign will make, before anything is bought.

``iam:SimulatePrincipalPolicy`` evaluates the principal's identity-based policies for a list of actions on
given resources with a given request context (IAM API reference, SimulatePrincipalPolicy,
https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html). The actions,
resources and context come from ``capserve.core.permissions`` for the features the spec uses. Read-only.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.locations import default_records_bucket
from capserve.core.permissions import (
    PermissionCheck,
    Simulation,
    campaign_targets,
    features_for,
    principal_to_simulate,
    simulations,
)
from capserve.core.spec import CampaignSpec
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.resilience import aws_task


def _denied(iam: object, principal: str, request: Simulation) -> list[str]:
    """The actions of ``request`` IAM does not allow ``principal`` (implicitly or explicitly) on one of its
    resources, in its order (an action once per resource refused)."""
    denied: list[str] = []
    params = {"PolicySourceArn": principal, "ActionNames": list(request.actions),
              "ResourceArns": list(request.resources),
              "ContextEntries": [{"ContextKeyName": k, "ContextKeyValues": [v], "ContextKeyType": "string"}
                                 for k, v in request.context]}
    while True:
        answer = iam.simulate_principal_policy(**params)  # type: ignore[attr-defined]
        denied += [r["EvalActionName"] for r in answer["EvaluationResults"] if r["EvalDecision"] != "allowed"]
        if not answer.get("IsTruncated"):
            return denied
        params["Marker"] = answer["Marker"]


_DENIED_CODES = ("AccessDenied", "AccessDeniedException")


@aws_task(name="preflight-permissions", cache_policy=NO_CACHE)
def check_permissions(
    spec: CampaignSpec, region: str, *, records_bucket: str | None, home_region: str
) -> PermissionCheck:
    """Simulate every action of the spec's features for the calling principal (an assumed role: its role)."""
    what = "simulating the campaign's AWS permissions"
    try:
        identity = client("sts", region).get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        raise convert(exc, what) from exc
    caller = str(identity["Arn"])
    found = principal_to_simulate(caller)
    if found is None:
        return PermissionCheck(skipped=f"{caller} cannot be simulated (the root user or a federated user)")
    kind, principal = found
    iam = client("iam", region)
    action = "iam:GetRole"
    try:
        if kind == "role":  # the session's ARN has no path: ask IAM for the role's own ARN
            principal = iam.get_role(RoleName=principal)["Role"]["Arn"]
        action = "iam:SimulatePrincipalPolicy"
        account, partition = str(identity["Account"]), caller.split(":")[1]
        targets = campaign_targets(
            campaign_id=spec.campaign_id, account_id=account, partition=partition,
            weights_bucket=spec.weights.s3_bucket, weights_prefix=spec.weights.s3_prefix,
            records_bucket=records_bucket or default_records_bucket(account, home_region),
        )
        features = features_for(
            provider=spec.capacity.provider, cluster_kind=spec.cluster.kind, image_mirror=spec.serving.image_mirror,
            existing_cluster=spec.cluster.existing_cluster_name is not None,
        )
        denied: list[str] = []
        for request in simulations(features, targets):
            denied += [a for a in dict.fromkeys(_denied(iam, principal, request)) if a not in denied]
    except ClientError as exc:
        if error_code(exc) in _DENIED_CODES:  # without this one, nothing else can be asked
            return PermissionCheck(principal=caller, denied=(action,))
        if error_code(exc) == "NoSuchEntity":  # the sandbox's anonymous caller: no IAM user behind its keys
            return PermissionCheck(skipped=f"{caller} is not an IAM user or role that IAM knows")
        raise convert(exc, what) from exc
    except BotoCoreError as exc:
        raise convert(exc, what) from exc
    existing = spec.cluster.existing_cluster_name if spec.cluster.kind == "eks" else None
    without = existing if existing and not _has_access_entry(region, existing, principal) else None
    return PermissionCheck(principal=principal, denied=tuple(sorted(denied)), no_cluster_access=without)


def _has_access_entry(region: str, cluster: str, principal: str) -> bool:
    """Whether ``principal`` (an IAM ARN) has an access entry on ``cluster``; True when EKS cannot say (a cluster
    in ``CONFIG_MAP`` mode maps principals in its aws-auth ConfigMap, which only the cluster can read)."""
    try:
        client("eks", region).describe_access_entry(clusterName=cluster, principalArn=principal)
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return False
        if error_code(exc) == "InvalidRequestException":
            return True
        raise convert(exc, f"reading the access entry of {principal} on EKS cluster {cluster}") from exc
    except BotoCoreError as exc:
        raise convert(exc, f"reading the access entry of {principal} on EKS cluster {cluster}") from exc
    return True
