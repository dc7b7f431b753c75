"""What the sandbox's moto lacks, added in-process (moto 5.2.5 is pinned in pyproject: these patch its internals).

Each module exposes ``install()``; it is registered in ``capserve.sandbox.aws.MOTO_EXTENSIONS`` and runs
before every sandbox server starts (installing twice is harmless). Order matters where two extensions
answer the same operation: both HyperPod and capacity answer SageMaker ListTags, and capacity's install
chains to whatever answered before it, so it is registered after HyperPod.
"""

from capserve.sandbox.aws import MOTO_EXTENSIONS
from capserve.sandbox.aws_ext import capacity, hyperpod  # hyperpod.install() installs eks too

for _install in (hyperpod.install, capacity.install):
    if _install not in MOTO_EXTENSIONS:
        MOTO_EXTENSIONS.append(_install)
