#!/bin/bash
# capserve's HyperPod lifecycle script (ClusterLifeCycleConfig.OnCreate), run once as root on each new
# node before it joins the EKS cluster. HyperPod needs the script to exist under SourceS3Uri and to
# exit 0, or the instance fails to provision ("Lifecycle scripts did not run successfully").
#
# It follows AWS's reference HyperPod-EKS lifecycle scripts (aws-samples/awsome-distributed-training,
# 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh; docs/hyperpod.md §2):
#   1. logs everything to /var/log/provision/provisioning.log (HyperPod ships /var/log to CloudWatch);
#   2. makes sure the instance-store NVMe is mounted at /opt/dlami/nvme, where capserve stages weights
#      and compile caches: the HyperPod AMI mounts it there (the reference waits up to 60 s for it); otherwise
#      the local NVMe disks (not the EBS volumes) become one RAID0 array, formatted xfs and mounted there;
#   3. moves containerd's root onto that array (the vLLM image unpacks there, not on the root volume);
#   4. MOVES the kubelet's directory onto the array and links /var/lib/kubelet to it. The directory is not
#      empty at this point: the EKS AMI keeps the kubelet's kubeconfig in it, so mounting an empty directory
#      over it would hide that file and the node would never join. With the kubelet's state on the array,
#      the node's ephemeral-storage is the NVMe (capserve's room check reads it);
#   5. when the layout spans nodes (EFA), pre-allocates the 2 MiB huge pages libfabric's EFA provider
#      uses, now and on every boot, before the kubelet starts and reports them as hugepages-2Mi: capserve
#      renders those lines in place of the CAPSERVE_HUGEPAGES line below (hyperpod.on_create_script).
# It fails (exit 1, so HyperPod reports the instance, before anything is served) only where going on would
# leave the node without its NVMe or the kubelet without its state.
set -uo pipefail

MOUNT=/opt/dlami/nvme
LOG_DIR=/var/log/provision
mkdir -p "$LOG_DIR"
exec >>"$LOG_DIR/provisioning.log" 2>&1
echo "[$(date -u +%FT%TZ)] capserve on_create.sh: start"

# The AMI mounts the instance store at boot; give it the reference's minute before doing it ourselves.
for _ in $(seq 1 12); do
  mountpoint -q "$MOUNT" && break
  sleep 5
done

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

  # containerd's root and the kubelet's state move onto the array, content included, and their usual paths
  # become links to it. The reference moves the kubelet's directory this way and points containerd's config at
  # a root on the disk; moving /var/lib/containerd the same way keeps whatever config the AMI renders. Neither
  # service may be running yet (the reference restarts neither): if one is, its directory stays where it is.
  relocate() {  # relocate SERVICE DIR NEW
    local service=$1 dir=$2 new=$3
    if [ -L "$dir" ]; then
      echo "$dir is already a link to $(readlink "$dir")"
    elif systemctl is-active --quiet "$service"; then
      echo "$service already running: $dir stays where it is"
    else
      mkdir -p "$new" "$dir"
      if [ -n "$(ls -A "$dir")" ]; then
        mv "$dir"/* "$new"/ || return 1
      fi
      rmdir "$dir" && ln -s "$new" "$dir" || return 1
      echo "$dir is on $MOUNT (its content moved)"
    fi
  }
  relocate containerd /var/lib/containerd "$MOUNT/containerd" || exit 1
  relocate kubelet /var/lib/kubelet "$MOUNT/kubelet" || exit 1
fi

#CAPSERVE_HUGEPAGES

echo "[$(date -u +%FT%TZ)] capserve on_create.sh: done"
exit 0
