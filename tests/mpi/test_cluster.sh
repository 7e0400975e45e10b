#!/usr/bin/env bash
# Emulated nodes (scripts/cluster/pc-cluster.sh) with Open MPI and Slurm across them:
#  - up refuses bad flags and a non-root user with one line; down is safe to run twice and
#    leaves none of the names it recorded;
#  - mpirun across 3 nodes: every rank reports its node's hostname, and a training run's
#    bytes cross the nodes' veth links (interface counters);
#  - Slurm across 2 nodes (a slurmd and a munged per node): srun puts ranks on both nodes;
#    the layout that stalled with --bind auto (2 workers on one node, a worker and the
#    server on the other, Open MPI not told to yield) finishes, 3 runs of 3;
#  - pc-train-multinode.sbatch across the 2 nodes, stopped by the time-limit signal,
#    requeued and resumed: the model is bitwise that of an uninterrupted run.
# Needs root and network namespaces; prints why and exits 77 (skipped) otherwise.
#   tests/mpi/test_cluster.sh BUILDDIR
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
train="$build/apps/pc-train"
pcc="$src/scripts/cluster/pc-cluster.sh"
[ "$(id -u)" = 0 ] || pc_skip "emulated nodes need root (network namespaces, tc)"
for t in ip tc nsenter unshare; do
    command -v "$t" >/dev/null || pc_skip "$t not installed (iproute2, util-linux)"
done
ip netns add "pcprobe$$" 2>/dev/null || pc_skip "cannot create a network namespace here"
ip netns del "pcprobe$$"

tmp=$(mktemp -d)
cl="$tmp/cl"
cleanup() {
    "$pcc" down "$cl" >/dev/null 2>&1
    "$pcc" down "$tmp/cl2" >/dev/null 2>&1
    if [ -n "${PC_KEEP_CLUSTER_LOGS:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 1. Refusals: one line naming the problem, non-zero, nothing created.
check_refusal() { # check_refusal WHAT PATTERN CMD...
    local what=$1 pat=$2 out rc
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" != 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && grep -q -- "$pat" <<<"$out" &&
        [ ! -e "$tmp/bad/cluster" ]; then
        ok "refused $what: $out"
    else
        bad "$what: status $rc, output: $out"
    fi
}
check_refusal "--nodes 0" "--nodes '0'" "$pcc" up "$tmp/bad" --nodes 0
check_refusal "--link fast" "rate 'fast'" "$pcc" up "$tmp/bad" --link fast
check_refusal "--cores half" "--cores 'half'" "$pcc" up "$tmp/bad" --cores half
check_refusal "a non-root user" "must run as root" runuser -u nobody -- "$pcc" up "$tmp/bad"
check_refusal "exec on no cluster" "no cluster recorded" "$pcc" exec "$tmp/bad" node0 true

# 2. Three nodes, 1 Gbit/s links; mpirun across them.
if ! "$pcc" up "$cl" --nodes 3 --link 1gbit >"$tmp/up.log" 2>&1; then
    bad "pc-cluster.sh up"; cat "$tmp/up.log"; pc_done
fi
ok "up: 3 nodes ($(grep -c '^node[0-9]' "$tmp/up.log") listed)"
hosts=$(timeout 60 "$pcc" mpirun "$cl" -np 3 --map-by node hostname 2>&1 | sort | tr '\n' ' ')
if [ "$hosts" = "node0 node1 node2 " ]; then
    ok "mpirun --map-by node: ranks report the hostnames $hosts"
else
    bad "mpirun hostnames: '$hosts'"
fi
veth() { awk -v n="$1" '$1 == n {print $5}' "$cl/nodes"; }
bytes() { cat "/sys/class/net/$(veth "$1")/statistics/$2_bytes"; }
declare -A rx0 tx0
for n in node0 node1 node2; do rx0[$n]=$(bytes "$n" rx); tx0[$n]=$(bytes "$n" tx); done
# Ranks 0 and 1 are the workers (node0, node1), rank 2 the server (node2).
if timeout 180 "$pcc" mpirun "$cl" -np 3 --map-by node "$train" --model cnn --data synthetic \
        --synthetic-samples 2000 --iters 10 --timeout 60 >"$tmp/mpirun.log" 2>&1 &&
    grep -q '^done: 10 iterations' "$tmp/mpirun.log"; then
    okc=1
    detail=""
    for n in node0 node1 node2; do
        # The host side's rx is what the node sent, its tx what the node received.
        s=$(($(bytes "$n" rx) - rx0[$n]))
        r=$(($(bytes "$n" tx) - tx0[$n]))
        detail="$detail $n sent $((s / 1000)) kB received $((r / 1000)) kB;"
        # Every node sends and receives at least the 3.3 M-parameter model's 13 MB once
        # (the workers' initial pull or the server's pushes back).
        { [ "$s" -gt 1000000 ] && [ "$r" -gt 1000000 ]; } || okc=0
    done
    if [ "$okc" = 1 ]; then
        ok "pc-train across 3 nodes: the bytes crossed the veth links:$detail"
    else
        bad "veth counters:$detail"
    fi
else
    bad "pc-train under mpirun across 3 nodes"; grep -v '^  ' "$tmp/mpirun.log" | tail -n 10
fi
id=$(sed -n 's/^id=//p' "$cl/cluster")
"$pcc" down "$cl" >/dev/null
if "$pcc" down "$cl" >"$tmp/down2.log" 2>&1; then ok "down twice: $(cat "$tmp/down2.log")"; else bad "second down failed"; fi
if ip netns list | grep -q "^pc$id-" || ip link show "pcb$id" >/dev/null 2>&1 || compgen -G "/run/uts-pc$id-*" >/dev/null; then
    bad "down left namespaces, the bridge or UTS files of cluster $id"
else
    ok "down removed every namespace, link and UTS file of cluster $id"
fi

# 3. Slurm across 2 nodes.
have_slurm=1
for b in munged slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || have_slurm=0
done
if [ "$have_slurm" = 0 ]; then
    echo "skip: Slurm across nodes (slurmctld slurmd slurm-client munge not installed)"
    pc_done
fi
cl2="$tmp/cl2"
if ! { "$pcc" up "$cl2" --nodes 2 >"$tmp/up2.log" 2>&1 && "$pcc" slurm "$cl2" start >>"$tmp/up2.log" 2>&1; }; then
    bad "Slurm across 2 nodes did not start"; cat "$tmp/up2.log"; tail -n 5 "$cl2"/slurm/*.log; pc_done
fi
# shellcheck disable=SC1091
. "$cl2/slurm/env"
hosts=$(timeout 60 srun -N 2 -n 2 hostname 2>&1 | sort | tr '\n' ' ')
[ "$hosts" = "node0 node1 " ] && ok "srun -N 2: ranks on $hosts" || bad "srun hostnames: '$hosts'"
# The layout that stalled: not told to yield, --bind auto (the default).
fin=0
for i in 1 2 3; do
    env -u OMPI_MCA_mpi_yield_when_idle timeout 240 srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix \
        "$train" --iters 300 --timeout 60 >"$tmp/srun$i.log" 2>&1 &&
        grep -q '^done: 300 iterations' "$tmp/srun$i.log" && fin=$((fin + 1))
done
if [ "$fin" = 3 ]; then
    ok "srun across 2 nodes, 2 workers + (worker, server), --bind auto, no yield: 3 of 3 finished"
else
    bad "srun across 2 nodes: $fin of 3 finished"; grep -v '^  ' "$tmp/srun3.log" | tail -n 8
fi

# 4. The multi-node batch script across the 2 nodes: time-limit signal, requeue, resume.
long=(--data synthetic --synthetic-samples 40000 --batch 16 --epochs 2 --lr 0.01)
"$src/scripts/pc-mpirun.sh" -t 300 -np 4 "$train" "${long[@]}" --save-model "$tmp/ref.pcm" \
    >"$tmp/ref.log" 2>&1 || bad "reference run (mpirun, one node)"
job_state() { scontrol show job "$1" 2>/dev/null | grep -o -E 'JobState=[A-Z_]+|Restarts=[0-9]+' | tr '\n' ' '; }
jid=$(cd "$src" && PC_TRAIN="$train" PC_CHECKPOINT_DIR="$tmp/ck" PC_CHECKPOINT_EVERY=200 \
    sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --output="$tmp/job.out" \
    scripts/slurm/pc-train-multinode.sbatch "${long[@]}" --save-model "$tmp/requeued.pcm")
for _ in $(seq 1200); do
    compgen -G "$tmp/ck/ckpt-*/MANIFEST" >/dev/null && break
    sleep 0.1
done
scancel --signal=USR1 --batch "$jid"
for _ in $(seq 600); do
    case $(job_state "$jid") in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*) break ;; esac
    sleep 0.5
done
state=$(job_state "$jid")
at=$(grep -o 'stopped by signal 15 after [0-9]* iterations (checkpoint written)' "$tmp/job.out" | awk '{print $6}')
from=$(grep -o 'resuming from the checkpoint of iteration [0-9]*' "$tmp/job.out" | awk '{print $7}')
nodes=$(grep -o 'on node[0-9]' "$tmp/job.out" | sort -u | tr '\n' ' ')
if [[ $state == *COMPLETED*Restarts=1* ]] && [ -n "$at" ] && [ "$at" = "$from" ] &&
    done_ref=$(grep -o '^done: [0-9]* iterations' "$tmp/ref.log") && [ -n "$done_ref" ] &&
    grep -q "^$done_ref" "$tmp/job.out" && cmp -s "$tmp/ref.pcm" "$tmp/requeued.pcm"; then
    ok "pc-train-multinode.sbatch on 2 nodes: stopped at iteration $at, requeued, resumed; model bitwise that of an uninterrupted run"
else
    bad "multi-node requeue (state '$state', stopped at '$at', resumed at '$from', $nodes)"
    grep -v '^  ' "$tmp/job.out" | tail -n 20
fi
pc_done
