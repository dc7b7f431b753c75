"""The sandbox plays a HyperPod lifecycle script on a stand-in node (capserve_sandbox.aws_ext.lifecycle).

The stand-in node has what the EKS AMI leaves in /var/lib/kubelet (the kubelet's kubeconfig) and in
/var/lib/containerd, and the instance store mounted at /opt/dlami/nvme (docs/hyperpod.md §6).
"""

from __future__ import annotations

from pathlib import Path

from capserve_sandbox.aws_ext import lifecycle

from capserve.core.cluster.hyperpod import on_create_script

BIND_MOUNT_SCRIPT = Path(__file__).parents[1] / "data" / "hyperpod" / "on_create_bind_mount.sh"


def test_capserves_script_moves_the_kubelet_state_onto_the_nvme_and_the_node_joins() -> None:
    outcome = lifecycle.play(on_create_script(hugepages_2mi_pages=5128))
    assert (outcome.exit_code, outcome.joins, outcome.kubelet_on_nvme) == (0, True, True), outcome.log_tail
    assert "/var/lib/containerd is on" in outcome.log_tail  # containerd's root moved too
    assert outcome.why_not_joined is None


def test_a_script_that_bind_mounts_over_the_kubelet_directory_hides_its_kubeconfig() -> None:
    outcome = lifecycle.play(BIND_MOUNT_SCRIPT.read_bytes())
    assert outcome.exit_code == 0 and not outcome.joins
    assert outcome.why_not_joined is not None and "/var/lib/kubelet/kubeconfig is gone" in outcome.why_not_joined


def test_a_script_that_leaves_the_kubelet_alone_joins_on_the_root_volume() -> None:
    outcome = lifecycle.play(b"#!/bin/bash\necho nothing to do\n")
    assert (outcome.exit_code, outcome.joins, outcome.kubelet_on_nvme) == (0, True, False)


def test_a_failing_script_reports_its_exit_code() -> None:
    outcome = lifecycle.play(b"#!/bin/bash\nmount /dev/md9 /opt/nowhere || exit 1\n")
    assert outcome.exit_code == 1 and "mount point does not exist" in outcome.log_tail
