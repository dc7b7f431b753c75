"""What the sandbox's moto lacks, added in-process (moto 5.2.5 is pinned in pyproject: these patch its internals).

Each module exposes ``install()``; ``capserve_sandbox.aws.moto_sandbox`` runs every installer in
``INSTALLERS`` before its server starts (installing twice is harmless). Order matters where two
extensions answer the same operation: both HyperPod and capacity answer SageMaker ListTags, and
capacity's install chains to whatever answered before it, so it comes after HyperPod; network wraps
EKS's CreateCluster (the zone rule), so it comes after HyperPod (which installs eks) too; quotas wraps
network's CreateNatGateway, so it comes after network.
"""

from collections.abc import Callable

from capserve_sandbox.aws_ext import (  # hyperpod.install() installs eks too
    capacity,
    ecr,
    eks_access,
    hyperpod,
    iam_rules,
    iam_simulate,
    network,
    quotas,
)

INSTALLERS: tuple[Callable[[], None], ...] = (
    hyperpod.install, eks_access.install, capacity.install, network.install, quotas.install,
    ecr.install,
    iam_simulate.install, iam_rules.install,
)
