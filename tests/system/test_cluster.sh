#!/usr/bin/env bash
# Emulated nodes (scripts/cluster/pc-cluster.sh) with Open MPI and Slurm across them:
#  - up refuses bad flags and a non-root user with one line; down is safe to run twice and
#    leaves none of the names it recorded;
#  - mpirun across 3 nodes: every rank reports its node's hostname, and a training run's
#    bytes cross the nodes' veth links (interface counters); --mode auto measures the link
#    between two nodes;
#  - faults (workers on node0 and node1, the server on node2): a link down for 5 s, a link
#    down past --timeout, a node's processes killed, 1 % packet loss; what TCP survives the
#    job survives, otherwise every rank ends by itself within --timeout naming the node it
#    waited for, and --resume gives bitwise the model of an uninterrupted run;
#  - Slurm across 2 nodes (a slurmd and a munged per node): srun puts ranks on both nodes;
#    the layout that stalled with --bind auto (2 workers on one node, a worker and the
#    server on the other, Open MPI not told to yield) finishes, 3 runs of 3;
#  - pc-train-multinode.sbatch across the 2 nodes, stopped by the time-limit signal,
#    requeued and resumed: the model is bitwise that of an uninterrupted run.
# Needs root and network namespaces; prints why and exits 77 (skipped) otherwise.
#   tests/system/test_cluster.sh BUILDDIR
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
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
check_refusal "--nodes without a value" "--nodes needs a count" "$pcc" up "$tmp/bad" --nodes
check_refusal "--link 0gbit" "must be above zero" "$pcc" up "$tmp/bad" --link 0gbit
check_refusal "no command" "no command" "$pcc"

# 2. Three nodes, 1 Gbit/s links; mpirun across them.
if ! "$pcc" up "$cl" --nodes 3 --link 1gbit >"$tmp/up.log" 2>&1; then
    bad "pc-cluster.sh up"; cat "$tmp/up.log"; pc_done
fi
ok "up: 3 nodes ($(grep -c '^node[0-9]' "$tmp/up.log") listed)"
# The ranks' stdout only: Open MPI's launcher may warn on stderr (a setpgid race of its rsh
# agent, harmless) and that once made this comparison fail.
hosts=$(timeout 60 "$pcc" mpirun "$cl" -np 3 --map-by node hostname 2>"$tmp/hosts.err" | sort | tr '\n' ' ')
if [ "$hosts" = "node0 node1 node2 " ]; then
    ok "mpirun --map-by node: ranks report the hostnames $hosts"
else
    bad "mpirun hostnames: '$hosts'"; cat "$tmp/hosts.err"
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
# --mode auto across the nodes: rank 0 measures the link to rank 1 on node1 (another host)
# and runs what it chose (which one is this machine's business: not asserted).
if timeout 180 "$pcc" mpirun "$cl" -np 3 --map-by node "$train" --mode auto --model mlp \
        --data synthetic --synthetic-samples 2000 --iters 5 --timeout 60 >"$tmp/auto.log" 2>&1 &&
    grep -qE '^auto: probe .*; link r0 - r1 \(node1, another host\): [0-9.]+ MB/s' "$tmp/auto.log" &&
    grep -q '^auto: chose ' "$tmp/auto.log" && grep -q '^done: 5 iterations' "$tmp/auto.log"; then
    ok "--mode auto across 3 nodes: $(grep -o 'link r0 - r1 ([^)]*): [0-9.]* MB/s' "$tmp/auto.log"); $(grep '^auto: chose' "$tmp/auto.log" | cut -d: -f2)"
else
    bad "--mode auto across 3 nodes"; grep -v '^  ' "$tmp/auto.log" | tail -n 10
fi

# 3. Faults across nodes (workers on node0 and node1, the server on node2), each against
# the model of an uninterrupted run: what TCP survives, the job survives; otherwise every
# rank ends by itself within --timeout with one line naming the node it waited for, and
# --resume from the last checkpoint gives the uninterrupted run's model.
ns_of() { awk -v n="$1" '$1 == n {print $3}' "$cl/nodes"; }
ranks_in() { # ranks_in NODE: pc-train processes in NODE's namespace
    local p k=0
    for p in $(ip netns pids "$(ns_of "$1")"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = pc-train ] && k=$((k + 1))
    done
    echo "$k"
}
fargs=(--model mlp --data synthetic --synthetic-samples 20000 --batch 16 --epochs 8 --lr 0.01
    --checkpoint-dir "$tmp/fck" --checkpoint-every 500)
frun() { # frun LOG TIMEOUT [more flags]: pc-train across the 3 nodes in the background ($fjob)
    local log=$1 to=$2
    shift 2
    timeout 300 "$pcc" mpirun "$cl" -np 3 --map-by node "$train" "${fargs[@]}" --timeout "$to" "$@" \
        >"$log" 2>&1 &
    fjob=$!
}
rm -rf "$tmp/fck"
frun "$tmp/fref.log" 60 --save-model "$tmp/fref.pcm"
wait "$fjob" || bad "fault reference run"
fdone=$(grep -o '^done: [0-9]* iterations' "$tmp/fref.log")

# 3a. node2's link down for 5 s in mid-run (--timeout 30): TCP retransmits; same model.
rm -rf "$tmp/fck"
frun "$tmp/fa.log" 30 --save-model "$tmp/fa.pcm"
pc_await_manifest "$tmp/fck" 60
"$pcc" link "$cl" node2 down
sleep 5
"$pcc" link "$cl" node2 up
if wait "$fjob" && grep -q "^$fdone" "$tmp/fa.log" && cmp -s "$tmp/fref.pcm" "$tmp/fa.pcm"; then
    ok "node2's link down 5 s in mid-run: the job went on; model bitwise that of an uninterrupted run"
else
    bad "link down 5 s"; grep -v '^  ' "$tmp/fa.log" | tail -n 8
fi

# 3b. node2's link down for longer than --timeout 8: every rank ends by itself while the
# link is still down (40 s), each with one line naming what it waited for and where;
# then, link up, --resume from the last checkpoint: the uninterrupted run's model.
rm -rf "$tmp/fck"
frun "$tmp/fb.log" 8
pc_await_manifest "$tmp/fck" 60
"$pcc" link "$cl" node2 down
ended=""
for s in $(seq 40); do
    sleep 1
    if [ "$(ranks_in node0)$(ranks_in node1)$(ranks_in node2)" = 000 ]; then ended=$s; break; fi
done
[ -n "$ended" ] || sleep $((40 - s))
"$pcc" link "$cl" node2 up
wait "$fjob"
frc=$?
w0=$(grep -c "^pc-train: training: worker r[01]: timed out after 8 s waiting for the update of tensor '.*' (chunk [0-9]*, server r2 on node2)" "$tmp/fb.log")
s2=$(grep -c "^pc-train: server: server r2: timed out after 8 s with no message, waiting for .*(node[01])" "$tmp/fb.log")
if [ -n "$ended" ] && [ "$frc" != 0 ] && [ "$w0" = 2 ] && [ "$s2" = 1 ]; then
    ok "node2's link down past --timeout 8: every rank ended by itself within $ended s, the link still down; each said what it awaited and on which node"
else
    bad "link down past --timeout (ranks ended: '${ended:-no, after 40 s}', status $frc, worker lines $w0, server lines $s2)"
    grep -v '^  ' "$tmp/fb.log" | tail -n 12
fi
frun "$tmp/fb2.log" 60 --resume --save-model "$tmp/fb.pcm"
if wait "$fjob" && grep -q 'resuming from the checkpoint of iteration' "$tmp/fb2.log" &&
    cmp -s "$tmp/fref.pcm" "$tmp/fb.pcm"; then
    ok "then --resume: $(grep -o 'resuming from the checkpoint of iteration [0-9]*' "$tmp/fb2.log"); model bitwise that of an uninterrupted run"
else
    bad "resume after the link failure"; grep -v '^  ' "$tmp/fb2.log" | tail -n 8
fi

# 3c. node1's processes killed (its Open MPI daemon and the worker): the job ends; resume.
rm -rf "$tmp/fck"
frun "$tmp/fc.log" 60
pc_await_manifest "$tmp/fck" 60
"$pcc" kill "$cl" node1 >/dev/null
ended=""
for s in $(seq 60); do
    sleep 1
    if [ "$(ranks_in node0)$(ranks_in node1)$(ranks_in node2)" = 000 ]; then ended=$s; break; fi
done
wait "$fjob"
frc=$?
frun "$tmp/fc2.log" 60 --resume --save-model "$tmp/fc.pcm"
if [ -n "$ended" ] && [ "$frc" != 0 ] && wait "$fjob" &&
    grep -q 'resuming from the checkpoint of iteration' "$tmp/fc2.log" && cmp -s "$tmp/fref.pcm" "$tmp/fc.pcm"; then
    ok "node1's processes killed: every rank ended within $ended s (status $frc); --resume: model bitwise that of an uninterrupted run"
else
    bad "node killed (ranks ended: '${ended:-no}', status $frc)"; grep -v '^  ' "$tmp/fc.log" | tail -n 6
    grep -v '^  ' "$tmp/fc2.log" | tail -n 6
fi

# 3d. 1 % of the packets lost each way on every node's link: TCP retransmits; same model.
if command -v nft >/dev/null; then
    for n in node0 node1 node2; do "$pcc" link "$cl" "$n" shape 1gbit,0,1%; done
    rm -rf "$tmp/fck"
    frun "$tmp/fd.log" 60 --save-model "$tmp/fd.pcm"
    if wait "$fjob" && grep -q "^$fdone" "$tmp/fd.log" && cmp -s "$tmp/fref.pcm" "$tmp/fd.pcm"; then
        ok "1 % packet loss on every link: finished; model bitwise that of an uninterrupted run"
    else
        bad "1 % loss"; grep -v '^  ' "$tmp/fd.log" | tail -n 8
    fi
else
    echo "skip: 1 % loss (nft not installed: apt-get install nftables)"
fi

id=$(sed -n 's/^id=//p' "$cl/cluster")
"$pcc" down "$cl" >/dev/null
if "$pcc" down "$cl" >"$tmp/down2.log" 2>&1; then ok "down twice: $(cat "$tmp/down2.log")"; else bad "second down failed"; fi
if grep -q "^pc$id-" <<<"$(ip netns list)" || ip link show "pcb$id" >/dev/null 2>&1 || compgen -G "/run/uts-pc$id-*" >/dev/null; then
    bad "down left namespaces, the bridge or UTS files of cluster $id"
else
    ok "down removed every namespace, link and UTS file of cluster $id"
fi

# 4. Slurm across 2 nodes.
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
check_refusal "a second slurm start" "Slurm already runs" "$pcc" slurm "$cl2" start
check_refusal "mpirun as a non-root user" "must run as root" runuser -u nobody -- "$pcc" mpirun "$cl2" -np 2 hostname
# kill spares the node's slurmd and munged: Slurm still runs jobs there afterwards.
"$pcc" kill "$cl2" node1 >/dev/null
hosts=$(timeout 60 srun -N 2 -n 2 hostname 2>&1 | sort | tr '\n' ' ')
[ "$hosts" = "node0 node1 " ] && ok "kill node1, then srun -N 2: ranks on $hosts (slurmd and munged spared)" ||
    bad "srun after kill: '$hosts'"
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

# 5. The multi-node batch script across the 2 nodes: time-limit signal, requeue, resume.
long=(--data synthetic --synthetic-samples 40000 --batch 16 --epochs 2 --lr 0.01)
"$src/scripts/pc-mpirun.sh" -t 300 -np 4 "$train" "${long[@]}" --save-model "$tmp/ref.pcm" \
    >"$tmp/ref.log" 2>&1 || bad "reference run (mpirun, one node)"
jid=$(cd "$src" && PC_TRAIN="$train" PC_CHECKPOINT_DIR="$tmp/ck" PC_CHECKPOINT_EVERY=200 \
    sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --output="$tmp/job.out" \
    scripts/slurm/pc-train-multinode.sbatch "${long[@]}" --save-model "$tmp/requeued.pcm")
pc_await_manifest "$tmp/ck" 120
scancel --signal=USR1 --batch "$jid"
pc_await_job "$jid" 600
state=$(pc_job_state "$jid")
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
