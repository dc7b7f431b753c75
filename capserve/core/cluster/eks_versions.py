"""The Kubernetes minor versions EKS creates clusters on, and the one check of a spec's version against them.

EKS creates a cluster on any version in standard or extended support and refuses others in ``CreateCluster``
(EKS user guide, "Understand the Kubernetes version lifecycle on EKS"; ``DescribeClusterVersions`` lists them).
The table and its source are in docs/eks-versions.md; a unit test keeps the two equal. Update both when EKS
adds or retires a version.
"""

from __future__ import annotations

from datetime import date

# minor version → (end of standard support, end of extended support), docs/eks-versions.md.
EKS_VERSIONS: dict[str, tuple[date, date]] = {
    "1.32": (date(2026, 3, 23), date(2027, 3, 23)),
    "1.33": (date(2026, 7, 29), date(2027, 7, 29)),
    "1.34": (date(2026, 12, 2), date(2027, 12, 2)),
    "1.35": (date(2027, 3, 27), date(2028, 3, 27)),
}


def kubernetes_version_problem(version: str) -> str | None:
    """Why EKS would refuse to create a cluster on ``version`` (None when it would not)."""
    if version in EKS_VERSIONS:
        return None
    return (
        f"EKS has no Kubernetes version {version!r}: use one of {', '.join(EKS_VERSIONS)} "
        "(docs/eks-versions.md, from the EKS user guide's release calendar)"
    )
