"""Bearer-token check: EKS-shaped tokens or the sandbox's static token; anything else is a 401.

An EKS token is ``k8s-aws-v1.`` + unpadded base64url of a presigned STS GetCallerIdentity URL,
signed (SigV4, query string) with the ``x-k8s-aws-id`` header among the signed headers
(aws-iam-authenticator README, "API Authorization from Outside a Cluster"). The authenticator
accepts it for 15 minutes after ``X-Amz-Date``. We check the shape and the age; we cannot call
STS, so the signature itself is not verified.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

EKS_PREFIX = "k8s-aws-v1."
EKS_MAX_AGE = timedelta(minutes=15)
_SIGNATURE = re.compile(r"^[0-9a-f]{64}$")


def eks_token_problem(token: str, now: datetime | None = None) -> str | None:
    """Why ``token`` is not an acceptable EKS token, or None if it is."""
    if not token.startswith(EKS_PREFIX):
        return "not an EKS token"
    encoded = token[len(EKS_PREFIX) :]
    try:
        url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return "token is not base64url"
    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    if parts.scheme not in ("https", "http") or parts.path not in ("", "/"):
        return "token is not an STS URL"
    if query.get("Action") != "GetCallerIdentity" or query.get("Version") != "2011-06-15":
        return "token does not presign sts:GetCallerIdentity"
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or "/sts/aws4_request" not in query.get(
        "X-Amz-Credential", ""
    ):
        return "token is not SigV4-signed for sts"
    if "x-k8s-aws-id" not in query.get("X-Amz-SignedHeaders", "").split(";"):
        return "token does not sign the x-k8s-aws-id (cluster name) header"
    if not _SIGNATURE.match(query.get("X-Amz-Signature", "")):
        return "token has no signature"
    try:
        signed_at = datetime.strptime(query.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "token has no X-Amz-Date"
    age = (now or datetime.now(UTC)) - signed_at
    if age > EKS_MAX_AGE:
        return f"token expired ({int(age.total_seconds())} s old)"
    return None


# Who may use the cluster with a valid EKS token: each check answers why the token's principal may not, or
# None (``capserve_sandbox.aws_ext.eks_access`` adds the access-entry check).
EKS_ACCESS_CHECKS: list[Callable[[str], str | None]] = []


def eks_token_query(token: str) -> dict[str, str]:
    """The presigned URL's query of a well-formed EKS token (``eks_token_problem`` is None)."""
    encoded = token[len(EKS_PREFIX) :]
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def check_bearer(header: str | None, static_token: str) -> tuple[str | None, str]:
    """(kind of token accepted or None, reason). Kinds: "eks", "static"."""
    if not header or not header.startswith("Bearer "):
        return None, "no bearer token"
    token = header[len("Bearer ") :].strip()
    if hmac.compare_digest(token.encode(), static_token.encode()):
        return "static", "ok"
    problem = eks_token_problem(token) or next((p for check in EKS_ACCESS_CHECKS if (p := check(token))), None)
    return (None, problem) if problem else ("eks", "ok")
