#!/usr/bin/env bash
# The shipped Slurm batch scripts on a real (one-node, localhost) Slurm cluster:
#  - pc-train.sbatch with sbatch --wait: trains, checkpoints, saves the model;
#  - the time-limit path: USR1 to the batch shell (what --signal=B:USR1@120 sends) makes
#    the ranks stop at an iteration boundary with a checkpoint; the script requeues the
#    job, which resumes and finishes with bitwise the model of an uninterrupted run;
#  - pc-train-multinode.sbatch (on one node) with the mpirun launcher;
#  - without PC_TRAIN and without pc-train on PATH, sbatch from a source tree finds its
#    build/apps/pc-train; a PC_TRAIN that is not a program fails the job with one line;
#  - scancel: the job ends cancelled, not requeued, and the log has no error of the
#    script's own.
# Starts munged, slurmctld and slurmd (scripts/slurm/local-cluster.sh) and stops them by
# pid. Needs root; prints why and exits 77 (skipped) where it is not root.
#   tests/mpi/test_slurm.sh BUILDDIR
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
train="$build/apps/pc-train"
if [ "$(id -u)" != 0 ]; then
    pc_skip "starting Slurm's daemons needs root"
fi
tmp=$(mktemp -d)
cluster="$tmp/cluster"
cleanup() {
    "$src/scripts/slurm/local-cluster.sh" stop "$cluster"
    rm -rf "$tmp"
}
trap cleanup EXIT
[ -n "${PC_KEEP_SLURM_LOGS:-}" ] && trap '"$src/scripts/slurm/local-cluster.sh" stop "$cluster"; echo "kept $tmp"' EXIT

"$src/scripts/slurm/local-cluster.sh" start "$cluster" || { echo "FAIL: cannot start Slurm"; exit 1; }
export SLURM_CONF="$cluster/slurm.conf" PC_TRAIN="$train"
cd "$tmp" || exit 1


# 1. The single-node script, start to end.
short=(--data synthetic --synthetic-samples 3000 --batch 16 --iters 60 --lr 0.01)
if PC_CHECKPOINT_DIR="$tmp/ck1" timeout 180 sbatch --wait --output="$tmp/job1.out" \
        "$src/scripts/slurm/pc-train.sbatch" "${short[@]}" --save-model "$tmp/one.pcm" >/dev/null &&
    grep -q '^done: 60 iterations' "$tmp/job1.out" && [ -s "$tmp/one.pcm" ] &&
    [ -e "$tmp/ck1/ckpt-000000000060/MANIFEST" ]; then
    ok "pc-train.sbatch (srun --mpi=pmix): trained 60 iterations, checkpoint and model written"
else
    bad "pc-train.sbatch run"; tail -n 15 "$tmp/job1.out"
fi

# 2. Time limit: USR1 -> clean stop with a checkpoint -> requeue -> resume -> same model.
long=(--data synthetic --synthetic-samples 40000 --batch 16 --epochs 2 --lr 0.01)
"$src/scripts/pc-mpirun.sh" -t 240 -np 3 "$train" "${long[@]}" --save-model "$tmp/ref.pcm" \
    >"$tmp/ref.log" 2>&1 || bad "reference run (mpirun)"
jid=$(PC_CHECKPOINT_DIR="$tmp/ck2" PC_CHECKPOINT_EVERY=200 sbatch --parsable --output="$tmp/job2.out" \
    "$src/scripts/slurm/pc-train.sbatch" "${long[@]}" --save-model "$tmp/requeued.pcm")
pc_await_manifest "$tmp/ck2" 120
scancel --signal=USR1 --batch "$jid"
# Slurm holds a requeued job until the old credentials expire (cred_expire, 10 s on the
# test cluster); then it starts again. Up to 240 s: on a loaded 2-core machine the
# requeued job was once seen still finishing its last epoch after 120 s.
pc_await_job "$jid" 480
state=$(pc_job_state "$jid")
at=$(grep -o 'stopped by signal 15 after [0-9]* iterations (checkpoint written)' "$tmp/job2.out" | awk '{print $6}')
from=$(grep -o 'resuming from the checkpoint of iteration [0-9]*' "$tmp/job2.out" | awk '{print $7}')
if [[ $state == *COMPLETED*Restarts=1* ]] && [ -n "$at" ] && [ "$at" = "$from" ] &&
    grep -q 'requeueing job' "$tmp/job2.out" && grep -q '^done: 2500 iterations' "$tmp/job2.out" &&
    cmp -s "$tmp/ref.pcm" "$tmp/requeued.pcm"; then
    ok "time limit: stopped at iteration $at with a checkpoint, requeued, resumed there; model bitwise identical to an uninterrupted run"
else
    bad "time-limit requeue (state '$state', stopped at '$at', resumed at '$from')"
    grep -v '^  ' "$tmp/job2.out" | tail -n 20
fi

# 3. The multi-node script, on this one node, with Open MPI's mpirun as the launcher.
if PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_LAUNCHER=mpirun PC_CHECKPOINT_DIR="$tmp/ck3" \
        timeout 180 sbatch --wait --nodes=1 --ntasks-per-node=3 --cpus-per-task=1 \
        --output="$tmp/job3.out" "$src/scripts/slurm/pc-train-multinode.sbatch" "${short[@]}" \
        >/dev/null && grep -q '^done: 60 iterations' "$tmp/job3.out"; then
    ok "pc-train-multinode.sbatch with PC_LAUNCHER=mpirun: trained"
else
    bad "pc-train-multinode.sbatch run"; tail -n 15 "$tmp/job3.out"
fi

# 4. The README's recipe, without PC_TRAIN and without pc-train on PATH: sbatch from the
# top of a PipeCompress tree finds build/apps/pc-train there. $tmp/tree is laid out like
# the source tree (scripts/ and build/ are links), so the job writes nothing into it.
nopath=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [ -x "$d/pc-train" ] || printf '%s:' "$d"; done)
mkdir -p "$tmp/tree" && ln -s "$src/scripts" "$tmp/tree/scripts" && ln -s "$build" "$tmp/tree/build"
if (cd "$tmp/tree" && env -u PC_TRAIN PATH="${nopath%:}" PC_CHECKPOINT_DIR="$tmp/ck4" timeout 180 \
        sbatch --wait --output="$tmp/job4.out" scripts/slurm/pc-train.sbatch "${short[@]}" >/dev/null) &&
    grep -q "tasks of $(realpath "$train")," "$tmp/job4.out" && grep -q '^done: 60 iterations' "$tmp/job4.out"; then
    ok "pc-train.sbatch without PC_TRAIN or pc-train on PATH: ran the tree's build/apps/pc-train"
else
    bad "pc-train.sbatch did not find build/apps/pc-train from the submission directory"
    tail -n 5 "$tmp/job4.out"
fi

# 5. A PC_TRAIN that is not a program (missing; not executable): the job fails before
# starting anything, with one line that names PC_TRAIN.
touch "$tmp/not-a-program"
for t in "$tmp/no-such-file" "$tmp/not-a-program"; do
    out="$tmp/job5-${t##*/}.out"
    PC_TRAIN=$t timeout 60 sbatch --wait --output="$out" "$src/scripts/slurm/pc-train.sbatch" \
        "${short[@]}" >/dev/null 2>&1
    rc=$?
    if [ "$rc" != 0 ] && [ "$(wc -l <"$out")" = 1 ] && grep -q "PC_TRAIN='$t' is not an executable program" "$out"; then
        ok "PC_TRAIN=${t##*/}: job failed (status $rc) with one line: $(cat "$out")"
    else
        bad "PC_TRAIN=${t##*/}: status $rc, $(wc -l <"$out") lines of log"; head -n 5 "$out"
    fi
done

# 6. scancel: Slurm signals every process of the job itself; the batch shell's trap must
# not try to signal the job again (that logged "scancel: error: ... Invalid job id").
jid=$(PC_CHECKPOINT_DIR="$tmp/ck6" PC_CHECKPOINT_EVERY=200 sbatch --parsable --output="$tmp/job6.out" \
    "$src/scripts/slurm/pc-train.sbatch" "${long[@]}")
pc_await_manifest "$tmp/ck6" 120
scancel "$jid"
# Until every process of the job has ended (squeue lists it while it is COMPLETING); the
# state is read on the way, as Slurm forgets an ended job after MinJobAge (4 s).
state=""
for _ in $(seq 120); do
    s=$(pc_job_state "$jid")
    [ -n "$s" ] && state=$s
    [ -z "$(squeue -h -j "$jid" -o %T 2>/dev/null)" ] && break
    sleep 0.5
done
if [[ $state == *CANCELLED*Restarts=0* ]] && grep -q 'pc-train.sbatch: job' "$tmp/job6.out" &&
    ! grep -q 'scancel: error' "$tmp/job6.out"; then
    ok "scancel: job cancelled, not requeued, no scancel error in its log"
else
    bad "scancel (state '$state')"; grep -v '^  ' "$tmp/job6.out" | tail -n 12
fi

# 7. Every sbatch command in the docs, in its short form, on this cluster (tests/mpi/test_docs.sh
#    says how a command is shortened; the other documented commands run in make check).
PC_SRCDIR="$src" PC_BUILDDIR="$build" "$src/tests/mpi/test_docs.sh" --sbatch >"$tmp/docs.log" 2>&1
rc=$?
sed 's/^/  docs: /' "$tmp/docs.log"
case $rc in
0) ok "the documented sbatch commands ran" ;;
77) echo "skip: the documented sbatch commands (build not in $src/build)" ;;
*) bad "a documented sbatch command failed" ;;
esac

pc_done
