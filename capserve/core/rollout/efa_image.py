"""Does a serving image carry the EFA stack NCCL needs across nodes? Judged from the image's own files (pure).

NCCL reaches EFA only through a network plugin it loads at start: AWS's aws-ofi-nccl, which calls libfabric's
``efa`` provider. NCCL looks for ``libnccl-net.so`` or ``libnccl-net-<NCCL_NET_PLUGIN>.so`` (NCCL's "Network
plugin" documentation; aws-ofi-nccl builds ``libnccl-net-ofi.so`` and ``libnccl-net.so``, older releases
``libnccl-net-aws-ofi.so``), and the EFA installer puts libfabric under ``/opt/amazon/efa/lib`` (EC2 user guide,
"Get started with EFA and NCCL"). Without them NCCL falls back to TCP sockets between nodes and a multi-node
server runs far below the plan (docs/serving.md §5.2). vLLM's own ``vllm-openai`` image, as its Dockerfile
builds it, installs neither; a multi-node layout needs a derived image that adds them.

The rule is used twice: preflight lists the image's files (``capserve.tasks.image_mirror.image_files``) before
anything is bought, and the sandbox's kubelet decides from the same files which transport its NCCL reports.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable

# File names, matched on the base name anywhere in the image (installers differ in their prefix:
# /opt/amazon/aws-ofi-nccl/lib, /opt/amazon/ofi-nccl/lib, /opt/aws-ofi-nccl/lib).
NCCL_NET_PLUGIN = "libnccl-net*.so*"
LIBFABRIC = "libfabric.so*"
EFA_STACK = {"aws-ofi-nccl (libnccl-net*.so)": NCCL_NET_PLUGIN, "libfabric (libfabric.so)": LIBFABRIC}


def efa_stack_found(names: Iterable[str]) -> frozenset[str]:
    """Which parts of the EFA stack (``EFA_STACK``'s keys) the image's file ``names`` hold."""
    bases = {posixpath.basename(name.rstrip("/")) for name in names}
    return frozenset(part for part, pattern in EFA_STACK.items() if any(fnmatch.fnmatchcase(b, pattern) for b in bases))


def efa_stack_problem(image: str, found: Iterable[str]) -> str | None:
    """Why ``image`` cannot serve a layout across nodes (None: it carries the whole stack), for the spec's author."""
    missing = sorted(set(EFA_STACK) - set(found))
    if not missing:
        return None
    return (
        f"serving.image: {image} lacks {' and '.join(missing)}, so NCCL would reach the other nodes over TCP "
        "sockets, not EFA: name an image built from it with the EFA installer's libfabric and aws-ofi-nccl "
        "(docs/serving.md §5.2), or choose a layout on one node"
    )
