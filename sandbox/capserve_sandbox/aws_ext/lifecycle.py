"""Plays a HyperPod lifecycle script on a stand-in of the node it runs on (docs/hyperpod.md §6).

HyperPod runs ``LifeCycleConfig.OnCreate`` as root on each new instance before its kubelet joins the EKS
cluster. Whether the node then joins, and where its kubelet keeps its state, depends on what the script did
to the node's disks, so the sandbox runs the script itself (bash, with a time limit) against a small root
directory laid out as the node's is at that moment, and reads the outcome from that directory:

- the EKS AMI keeps the kubelet's kubeconfig in ``/var/lib/kubelet`` (awslabs/amazon-eks-ami, AL2
  ``templates/al2/provisioners/install-worker.sh`` moves ``kubelet-kubeconfig`` to
  ``/var/lib/kubelet/kubeconfig`` at build time), and AWS's reference HyperPod-EKS lifecycle script moves that
  directory's content before linking it elsewhere (aws-samples/awsome-distributed-training,
  ``1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh``): the stand-in
  node has a kubeconfig there and container images under ``/var/lib/containerd``;
- the HyperPod AMI has mounted the instance store at ``/opt/dlami/nvme`` and the extra EBS volume at
  ``/opt/sagemaker`` (ClusterEbsVolumeConfig: "mounted to /opt/sagemaker"); the kubelet and containerd have not
  started (the reference restarts neither) [inf];
- the node's system commands the script may call (``mount``, ``mountpoint``, ``systemctl``, ``sysctl``,
  ``mdadm``, ``mkfs.xfs``) are stand-ins: a bind mount hides what was in the target directory, as the kernel
  does; every absolute path of the script under ``/var``, ``/opt``, ``/etc``, ``/sys``, ``/proc``, ``/run`` or
  ``/dev`` (``/dev/null`` excepted) is taken inside the stand-in root.

A script that exits non-zero fails the instance (SageMaker's lifecycle FailureMessage); one that hides or loses
``/var/lib/kubelet/kubeconfig`` leaves an instance that runs but never becomes a Kubernetes node.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

NVME_MOUNT = "/opt/dlami/nvme"
EBS_MOUNT = "/opt/sagemaker"
KUBECONFIG = "/var/lib/kubelet/kubeconfig"
# How long a script may run in the sandbox (HyperPod allows far longer; a stand-in node has nothing slow to do).
TIMEOUT_S = 60.0

_PATHS = re.compile(r"(?<![\w.$/-])/(?=(?:var|opt|etc|sys|proc|run|dev)(?:/|\b))(?!dev/null\b)")

_STUBS: dict[str, str] = {
    # mount: no arguments lists the mounts; --bind/-o bind SRC DST hides DST's content under SRC's.
    "mount": r"""#!/bin/bash
table="$NODE_ROOT/.mounts"
if [ $# -eq 0 ]; then while read -r dev at; do echo "$dev on $at type xfs (rw)"; done <"$table"; exit 0; fi
args=(); bind=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bind|--rbind) bind=1 ;;
    -o) shift; case "$1" in *bind*) bind=1 ;; esac ;;
    -*) ;;
    *) args+=("$1") ;;
  esac
  shift
done
src="${args[0]}"; dst="${args[1]}"
[ -d "$dst" ] || { echo "mount: $dst: mount point does not exist" >&2; exit 32; }
if [ "$bind" = 1 ]; then
  hidden="$NODE_ROOT/.covered/$(echo "$dst" | tr / _)"; mkdir -p "$NODE_ROOT/.covered"
  mv "$dst" "$hidden" && ln -s "$src" "$dst"
fi
echo "$src $dst" >>"$table"
""",
    "mountpoint": r"""#!/bin/bash
for last; do :; done
grep -q " ${last%/}\$" "$NODE_ROOT/.mounts"
""",
    # Nothing of the node runs yet: every unit is inactive; everything else succeeds.
    "systemctl": r"""#!/bin/bash
echo "systemctl $*" >>"$NODE_ROOT/.systemctl"
case "$1" in is-active) exit 3 ;; status) exit 3 ;; esac
exit 0
""",
    "sysctl": r"""#!/bin/bash
for arg; do case "$arg" in vm.nr_hugepages=*) echo "${arg#*=}" >"$NODE_ROOT/proc/sys/vm/nr_hugepages" ;; esac; done
""",
    "mdadm": "#!/bin/bash\nexit 0\n",
    "mkfs.xfs": "#!/bin/bash\nexit 0\n",
}


@dataclass(frozen=True)
class LifecycleOutcome:
    """What the script left on the node."""

    exit_code: int
    joins: bool  # the kubelet still finds its kubeconfig, so the node registers
    kubelet_on_nvme: bool  # /var/lib/kubelet resolves onto the instance store (ephemeral storage is the NVMe)
    log_tail: str

    @property
    def why_not_joined(self) -> str | None:
        if self.joins:
            return None
        return (
            f"{KUBECONFIG} is gone after the lifecycle script (the AMI keeps the kubelet's kubeconfig there; "
            "a script that mounts over /var/lib/kubelet without moving its content hides it): the kubelet cannot "
            "reach the API server and the node never joins"
        )


def in_root(script: str, root: Path) -> str:
    """``script`` with its node paths taken inside ``root``."""
    return _PATHS.sub(str(root) + "/", script)


def _node(root: Path) -> None:
    """The node as the HyperPod EKS AMI leaves it when the lifecycle script starts."""
    for directory in ("var/lib/kubelet", "var/lib/containerd/io.containerd.content.v1.content", "var/log",
                      "etc/eks/containerd", "etc/containerd", "etc/systemd/system", "etc/sysctl.d", "proc/sys/vm",
                      NVME_MOUNT[1:], EBS_MOUNT[1:], "dev", "sys/block", "run"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / KUBECONFIG[1:]).write_text("apiVersion: v1\nkind: Config\n# the AMI's kubelet kubeconfig\n")
    (root / "var/lib/kubelet/config.json").write_text("{}\n")
    (root / "var/lib/containerd/io.containerd.content.v1.content/pause").write_text("pre-pulled\n")
    (root / "etc/os-release").write_text('NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2023"\n')
    (root / "etc/containerd/config.toml").write_text('version = 2\nroot = "/var/lib/containerd"\n')
    (root / "etc/fstab").write_text("")
    (root / "proc/sys/vm/nr_hugepages").write_text("0\n")
    (root / ".mounts").write_text(f"/dev/md0 {root}{NVME_MOUNT}\n/dev/nvme1n1 {root}{EBS_MOUNT}\n")


def play(script: bytes) -> LifecycleOutcome:
    """Run ``script`` as HyperPod would on a new instance of the stand-in node, and say what it left."""
    with tempfile.TemporaryDirectory(prefix="capserve-lifecycle-") as tmp:
        root = Path(tmp) / "node"
        _node(root)
        stubs = Path(tmp) / "bin"
        stubs.mkdir()
        for name, body in _STUBS.items():
            (stubs / name).write_text(body)
            (stubs / name).chmod(0o755)
        (Path(tmp) / "on_create.sh").write_text(in_root(script.decode("utf-8", "replace"), root))
        env = {"PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}", "NODE_ROOT": str(root), "HOME": tmp}
        try:
            done = subprocess.run(
                ["bash", "on_create.sh"], cwd=tmp, env=env, capture_output=True, timeout=TIMEOUT_S, check=False  # noqa: S607 - PATH is set above, the stubs first: a bare name is the point
            )
            code = done.returncode
            output = (done.stdout + done.stderr).decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            code, output = 124, f"the lifecycle script ran longer than the sandbox's {TIMEOUT_S:.0f} s"
        log = root / "var/log/provision/provisioning.log"
        output += log.read_text(errors="replace") if log.is_file() else ""
        kubelet = (root / "var/lib/kubelet").resolve()
        return LifecycleOutcome(
            exit_code=code,
            joins=(root / KUBECONFIG[1:]).is_file(),
            kubelet_on_nvme=kubelet.is_relative_to((root / NVME_MOUNT[1:]).resolve()),
            log_tail=output[-2000:],
        )
