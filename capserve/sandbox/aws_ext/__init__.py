"""What the sandbox's moto lacks, added in-process (moto 5.2.5 is pinned in pyproject: these patch its internals).

Each module exposes ``install()``; it is registered in ``capserve.sandbox.aws.MOTO_EXTENSIONS`` and runs
before every sandbox server starts (installing twice is harmless).
"""

from capserve.sandbox.aws import MOTO_EXTENSIONS
from capserve.sandbox.aws_ext import capacity

if capacity.install not in MOTO_EXTENSIONS:
    MOTO_EXTENSIONS.append(capacity.install)
from capserve.sandbox.aws_ext import hyperpod  # noqa: E402 - EKS + HyperPod; hyperpod.install() installs eks too

if hyperpod.install not in MOTO_EXTENSIONS:
    MOTO_EXTENSIONS.append(hyperpod.install)
