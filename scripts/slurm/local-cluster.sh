#!/usr/bin/env bash
# local-cluster.sh: a one-node Slurm cluster on localhost, without systemd, for tests and
# for trying the batch scripts on a workstation.
#   scripts/slurm/local-cluster.sh start DIR   write DIR/slurm.conf, start munged, slurmctld
#                                             and slurmd (each writes a pid file in DIR)
#   scripts/slurm/local-cluster.sh stop DIR    stop the three daemons by pid
# Then: export SLURM_CONF=DIR/slurm.conf; sbatch ... Needs root (the daemons run as root,
# munged as user munge) and the Debian packages slurmctld slurmd slurm-client munge.
# The node advertises max(64, cores) CPUs (config_overrides): the documented jobs, up to 32
# one-CPU tasks when tests/system/test_docs.sh folds a multi-node job onto this node, fit on a
# 2-core machine, oversubscribed.
# PC_SLURM_GPUS=N (start): the node also advertises N fake GPUs (GresTypes=gpu, a gres.conf
# whose devices are DIR/dev/nvidia0.. made with mknod as copies of /dev/null: nothing can
# compute on them). Slurm then schedules --gres=gpu:K jobs and sets CUDA_VISIBLE_DEVICES and
# SLURM_GPUS_ON_NODE as on a GPU node, so the GPU batch scripts' layout can be tested on a
# machine without GPUs. Without it (or 0) the node has no GPUs, as before.
set -euo pipefail
. "$(dirname "$0")/../lib.sh" # pc_stop_pid
die() { echo "local-cluster.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: $0 start|stop DIR"
cmd=$1
dir=$(realpath -m "$2")

case $cmd in
start)
    [ "$(id -u)" = 0 ] || die "must run as root (it starts munged, slurmctld and slurmd)"
    for b in munged slurmctld slurmd sinfo; do
        command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] \
            || die "$b not found: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
    done
    mkdir -p "$dir/state" "$dir/spool"
    cpus=$(nproc)
    [ "$cpus" -ge 64 ] || cpus=64
    fake_gpus=${PC_SLURM_GPUS:-0}
    [[ $fake_gpus =~ ^[0-9]{1,2}$ ]] || die "PC_SLURM_GPUS='$fake_gpus' is not a GPU count (0-99)"
    gres_node="" gres_types=""
    rm -f "$dir/gres.conf"
    if [ "$fake_gpus" -gt 0 ]; then
        mkdir -p "$dir/dev"
        for ((i = 0; i < fake_gpus; i++)); do
            # Character device 1:3 is /dev/null's: slurmd wants a device file, not what it is.
            [ -c "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 1 3 ||
                die "cannot make the fake GPU device $dir/dev/nvidia$i (mknod needs root and a file system that allows device nodes)"
        done
        echo "NodeName=localhost Name=gpu File=$dir/dev/nvidia[0-$((fake_gpus - 1))]" >"$dir/gres.conf"
        gres_node=" Gres=gpu:$fake_gpus"
        gres_types="GresTypes=gpu"
    fi
    cat >"$dir/slurm.conf" <<CONF
ClusterName=pclocal
SlurmctldHost=localhost
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
$(grep -v '^#' "$(dirname "$0")/common.conf")
$gres_types
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus$gres_node State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
    # The ports are fixed (common.conf): a cluster already running here would answer for
    # ours, and take its jobs.
    if SLURM_CONF=$dir/slurm.conf timeout 20 scontrol ping 2>/dev/null | grep " is UP" >/dev/null; then
        die "a slurmctld already answers on this machine's Slurm port (another local cluster?): stop it first"
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    if ! [ -S /run/munge/munge.socket.2 ] || ! munge -n </dev/null >/dev/null 2>&1; then
        [ -s /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || /usr/sbin/create-munge-key -f; }
        runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid \
            || die "munged did not start"
        cp /run/munge/munged.pid "$dir/munged.pid"
    fi
    /usr/sbin/slurmctld -f "$dir/slurm.conf" || die "slurmctld did not start (see $dir/slurmctld.log)"
    /usr/sbin/slurmd -f "$dir/slurm.conf" -N localhost || die "slurmd did not start (see $dir/slurmd.log)"
    export SLURM_CONF=$dir/slurm.conf
    for _ in $(seq 100); do
        state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
        case $state in idle*|mix*|alloc*) echo "local Slurm cluster up: export SLURM_CONF=$dir/slurm.conf"; exit 0 ;; esac
        sleep 0.2
    done
    die "the node did not become idle (state '${state:-none}'; see $dir/slurmctld.log and $dir/slurmd.log)"
    ;;
stop)
    pc_stop_pid "$dir/slurmd.pid"
    pc_stop_pid "$dir/slurmctld.pid"
    pc_stop_pid "$dir/munged.pid"
    ;;
*)
    die "usage: $0 start|stop DIR"
    ;;
esac
