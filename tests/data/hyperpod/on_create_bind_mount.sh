#!/bin/bash
# TEST DATA: capserve's lifecycle script before it followed AWS's reference (it bind-mounts an empty
# directory over /var/lib/kubelet instead of moving its content). Kept to show the sandbox refuses it.
# capserve's HyperPod lifecycle script (ClusterLifeCycleConfig.OnCreate), run once as root on each new
# node before it joins the EKS cluster. HyperPod needs the script to exist under SourceS3Uri and to
# exit 0, or the instance fails to provision ("Lifecycle scripts did not run successfully").
#
# What it does (docs/hyperpod.md §2):
#   1. logs everything to /var/log/provision/provisioning.log (HyperPod ships /var/log to CloudWatch);
#   2. makes sure the instance-store NVMe is mounted at /opt/dlami/nvme, where capserve stages weights
#      and compile caches: the HyperPod DLAMI usually mounts it there already; otherwise the local NVMe
#      disks (not the EBS volumes) become one RAID0 array, formatted xfs and mounted there;
#   3. moves the kubelet's directory onto that array before the kubelet first starts, as nodeadm's
#      RAID0 does on EKS nodes, so the node's ephemeral-storage reports the NVMe (capserve's room check
#      reads it) and pod scratch space does not fill the root volume.
#   4. when the layout spans nodes (EFA), pre-allocates the 2 MiB huge pages libfabric's EFA provider
#      uses, now and on every boot, before the kubelet starts and reports them as hugepages-2Mi: capserve
#      renders those lines in place of the CAPSERVE_HUGEPAGES line below (hyperpod.on_create_script).
# Anything it cannot do is logged and left alone: the script still exits 0 unless the array it
# created cannot be mounted, since a node without its NVMe cannot hold the weights.
set -uo pipefail

MOUNT=/opt/dlami/nvme
LOG_DIR=/var/log/provision
mkdir -p "$LOG_DIR"
exec >>"$LOG_DIR/provisioning.log" 2>&1
echo "[$(date -u +%FT%TZ)] capserve on_create.sh: start"

if mountpoint -q "$MOUNT"; then
  echo "instance-store NVMe already mounted at $MOUNT"
else
  # Instance-store NVMe disks report the model "Amazon EC2 NVMe Instance Storage"; EBS volumes do not.
  disks=()
  for dev in /dev/nvme*n1; do
    [ -b "$dev" ] || continue
    model=$(cat "/sys/block/$(basename "$dev")/device/model" 2>/dev/null || true)
    case "$model" in *"Instance Storage"*) disks+=("$dev") ;; esac
  done
  if [ "${#disks[@]}" -eq 0 ]; then
    echo "no instance-store NVMe disks: nothing mounted at $MOUNT"
  else
    mkdir -p "$MOUNT"
    if [ "${#disks[@]}" -eq 1 ]; then
      target="${disks[0]}"
    else
      target=/dev/md/capserve-nvme
      mdadm --create "$target" --level=0 --raid-devices="${#disks[@]}" "${disks[@]}" --run || exit 1
    fi
    mkfs.xfs -f "$target" || exit 1
    mount "$target" "$MOUNT" || exit 1
    echo "$target $MOUNT xfs defaults,nofail 0 2" >>/etc/fstab
    echo "mounted ${#disks[@]} instance-store disk(s) at $MOUNT"
  fi
fi

if mountpoint -q "$MOUNT"; then
  mkdir -p "$MOUNT/capserve/weights" "$MOUNT/capserve/cache"
  if systemctl is-active --quiet kubelet; then
    echo "kubelet already running: /var/lib/kubelet stays where it is"
  else
    mkdir -p "$MOUNT/kubelet" /var/lib/kubelet
    mount --bind "$MOUNT/kubelet" /var/lib/kubelet && \
      echo "$MOUNT/kubelet /var/lib/kubelet none bind,nofail 0 0" >>/etc/fstab && \
      echo "/var/lib/kubelet is on $MOUNT"
  fi
fi

#CAPSERVE_HUGEPAGES

echo "[$(date -u +%FT%TZ)] capserve on_create.sh: done"
exit 0
