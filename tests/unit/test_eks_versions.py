"""The Kubernetes versions EKS supports: one table, in docs/eks-versions.md and in the code that reads it."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from capserve.core.cluster.eks_versions import EKS_VERSIONS, kubernetes_version_problem

DOC = Path(__file__).resolve().parents[2] / "docs" / "eks-versions.md"


def test_the_docs_table_and_the_code_hold_the_same_versions_and_dates() -> None:
    rows = re.findall(r"^\| (1\.\d+) \| (\d{4}-\d{2}-\d{2}) \| (\d{4}-\d{2}-\d{2}) \|$", DOC.read_text(), re.M)
    in_docs = {v: (date.fromisoformat(s), date.fromisoformat(e)) for v, s, e in rows}
    assert in_docs == EKS_VERSIONS


def test_a_version_eks_lacks_is_refused_naming_the_supported_ones() -> None:
    assert kubernetes_version_problem("1.34") is None
    problem = kubernetes_version_problem("1.39") or ""
    assert problem.startswith("EKS has no Kubernetes version '1.39': use one of 1.32, 1.33, 1.34, 1.35")


def test_a_recorded_spec_on_a_retired_version_still_loads_for_its_teardown() -> None:
    import yaml

    from capserve.core.record import SpecSnapshot
    from capserve.core.spec import parse_spec

    data = yaml.safe_load((DOC.parents[1] / "examples" / "kimi-k3-sandbox.yaml").read_text())
    document = parse_spec(data).model_dump(mode="json")
    document["cluster"]["kubernetes_version"] = "1.31"  # once supported, retired since
    snapshot = SpecSnapshot(document=document, digest="0" * 64)
    assert snapshot.load().cluster.kubernetes_version == "1.31"
