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
#    script's own;
#  - the GPU scripts (pc-train-gpu.sbatch, pc-train-gpu-multinode.sbatch): bash -n and
#    --help, warnings of shellcheck where installed; the launch command they build (PC_SLURM_DRY_RUN=1)
#    for one and two nodes, both launchers, ps and allreduce, from a faked job environment;
#    every refused input (exit 2, one line); then on the cluster, whose node advertises 4
#    fake GPUs (PC_SLURM_GPUS=4: /dev/null-like devices, nothing runs on them): the scripts
#    as written pass sbatch --test-only, every task of the step sees the GPUs Slurm gives
#    (CUDA_VISIBLE_DEVICES; one each with --gpu-bind), pc-train trains through the script
#    with --device emulate, and bad input fails the job with one line. Where fake devices
#    cannot be made, the cluster has no GPUs and those cluster checks are skipped (said so).
# Starts munged, slurmctld and slurmd (scripts/slurm/local-cluster.sh) and stops them by
# pid. Needs root; prints why and exits 77 (skipped) where it is not root.
#   tests/system/test_slurm.sh BUILDDIR
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
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

# With 4 fake GPUs (for section 8) when the devices can be made; else without, as before.
fake_gpus=4
if PC_SLURM_GPUS=$fake_gpus "$src/scripts/slurm/local-cluster.sh" start "$cluster" >"$tmp/start.log" 2>&1; then
    cat "$tmp/start.log"
else
    echo "note: the test cluster has no fake GPUs: $(tail -n 1 "$tmp/start.log")"
    "$src/scripts/slurm/local-cluster.sh" stop "$cluster"
    fake_gpus=0
    "$src/scripts/slurm/local-cluster.sh" start "$cluster" || { echo "FAIL: cannot start Slurm"; exit 1; }
fi
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

# 8. The GPU scripts. This machine has no GPU: the layout they compute and the command they
# build are checked exactly, Slurm's side on fake GPUs, training with --device emulate.
gpu1="$src/scripts/slurm/pc-train-gpu.sbatch"
gpun="$src/scripts/slurm/pc-train-gpu-multinode.sbatch"
# 8a. Syntax, shellcheck (warnings and errors), --help.
for s in "$gpu1" "$gpun"; do
    if bash -n "$s"; then ok "bash -n ${s##*/}"; else bad "bash -n ${s##*/}"; fi
    out=$(bash "$s" --help 2>&1)
    rc=$?
    if [ $rc = 0 ] && grep -q -- '--gres=gpu:' <<<"$out" && grep -q "^${s##*/}: " <<<"$out" &&
        ! grep -q '^#' <<<"$out"; then
        ok "${s##*/} --help: its description ($(wc -l <<<"$out") lines), status 0"
    else
        bad "${s##*/} --help: status $rc"; head -n 3 <<<"$out"
    fi
done
# The CPU scripts' --help describes them and starts no job.
for s in "$src/scripts/slurm/pc-train.sbatch" "$src/scripts/slurm/pc-train-multinode.sbatch"; do
    out=$(env -u SLURM_NTASKS bash "$s" --help 2>&1)
    rc=$?
    if [ $rc = 0 ] && grep -q "^${s##*/}: " <<<"$out" && ! grep -q -e '^#' -e '(restart ' <<<"$out"; then
        ok "${s##*/} --help: its description, no job"
    else
        bad "${s##*/} --help: status $rc"; head -n 3 <<<"$out"
    fi
done
if command -v shellcheck >/dev/null 2>&1; then
    if out=$(shellcheck -S warning "$src"/scripts/slurm/*.sbatch "$src/scripts/slurm/local-cluster.sh" 2>&1); then
        ok "shellcheck -S warning: the batch scripts and local-cluster.sh"
    else
        bad "shellcheck"; head -n 20 <<<"$out"
    fi
else
    echo "skip: shellcheck (not installed)"
fi

# 8b. Outside Slurm, in a faked job environment (the variables sbatch exports), with
# PC_SLURM_DRY_RUN=1: the exact launch command. gpu_dry VAR=VALUE... -- SCRIPT ARGS...
gpu_dry() {
    local vars=()
    while [ "$1" != -- ]; do vars+=("$1"); shift; done
    shift
    env -i PATH="$PATH" HOME="$tmp" PC_TRAIN="$train" PC_CHECKPOINT_DIR="$tmp/ckd" \
        PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_SLURM_DRY_RUN=1 "${vars[@]}" bash "$@" 2>&1
}
# expect_dry WHAT OUTPUT LAUNCHER-WORDS... -- PC-TRAIN-FLAGS...: the dry-run line of OUTPUT
# is exactly that command (each word quoted as printf %q does).
expect_dry() {
    local what=$1 out=$2 want=() got
    shift 2
    while [ "$1" != -- ]; do want+=("$1"); shift; done
    shift
    want+=("$train" --checkpoint-dir "$tmp/ckd" --checkpoint-every 500 --resume "$@")
    got=$(grep '^pc-train.sbatch: dry run:' <<<"$out")
    if [ "$got" = "pc-train.sbatch: dry run:$(printf ' %q' "${want[@]}")" ]; then
        ok "$what: ${got#pc-train.sbatch: dry run: }"
    else
        bad "$what: got '$got'"; echo "$out"
    fi
}
srun_words=(srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=none)
out=$(gpu_dry SLURM_NTASKS=5 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4 -- "$gpu1" --compress-on cpu --gpu 3,2,1,0)
expect_dry "1 node, 4 GPUs, 5 tasks" "$out" "${srun_words[@]}" -- \
    --device cuda --servers 1 --compress-on cpu --gpu 3,2,1,0
grep -q -F "; pc-train-gpu.sbatch: 1 node(s) x 4 GPU(s), 4 workers (one per GPU) and 1 server(s)" <<<"$out" ||
    bad "1 node: the log's first line does not give the layout"
out=$(gpu_dry SLURM_NTASKS=10 SLURM_JOB_NUM_NODES=2 "SLURM_TASKS_PER_NODE=5(x2)" CUDA_VISIBLE_DEVICES=0,1,2,3 -- "$gpun")
expect_dry "2 nodes x (4 GPUs from CUDA_VISIBLE_DEVICES + 1 server), multinode script" "$out" \
    "${srun_words[@]}" --distribution=cyclic -- --device cuda --servers 2
out=$(gpu_dry PC_LAUNCHER=mpirun SLURM_NTASKS=12 SLURM_JOB_NUM_NODES=2 SLURM_GPUS_ON_NODE=4 -- "$gpu1" --servers=4)
expect_dry "2 nodes x (4 GPUs + 2 servers), mpirun" "$out" mpirun --bind-to none -np 12 --map-by node -- \
    --device cuda --servers 4 --servers=4
out=$(gpu_dry SLURM_NTASKS=4 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4 -- "$gpu1" --mode allreduce)
expect_dry "--mode allreduce, one task per GPU, no servers" "$out" "${srun_words[@]}" -- --device cuda --mode allreduce
out=$(gpu_dry PC_GPUS=2 SLURM_NTASKS=3 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4 -- "$gpu1")
expect_dry "PC_GPUS=2 of 4 allocated" "$out" "${srun_words[@]}" -- --device cuda --servers 1

# Refused: status 2 and one line saying what to do. refuse TEXT VAR=VALUE... -- SCRIPT ARGS...
refuse() {
    local text=$1 out rc
    shift
    out=$(gpu_dry "$@")
    rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q -F -- "$text" <<<"$out"; then
        ok "refused (2): $out"
    else
        bad "expected status 2 and one line with '$text'; status $rc:"; echo "$out"
    fi
}
job1=(SLURM_NTASKS=5 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4)
for g in x 0 -1 1.5 "" " 2"; do
    refuse "PC_GPUS='$g' is not a positive integer" "${job1[@]}" "PC_GPUS=$g" -- "$gpu1"
done
refuse "PC_GPUS=8 but Slurm allocated 4 GPUs per node" "${job1[@]}" PC_GPUS=8 -- "$gpu1"
refuse "no GPUs in this job" SLURM_NTASKS=5 SLURM_JOB_NUM_NODES=1 -- "$gpu1"
refuse "Slurm reports 'two' GPUs" SLURM_NTASKS=5 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=two -- "$gpu1"
refuse "not inside a Slurm job" SLURM_GPUS_ON_NODE=4 -- "$gpu1"
refuse "3 tasks per node for 4 GPUs" SLURM_NTASKS=3 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4 -- "$gpu1"
refuse "leave none for a server" SLURM_NTASKS=4 SLURM_JOB_NUM_NODES=1 SLURM_GPUS_ON_NODE=4 -- "$gpu1"
refuse "spread unevenly over the nodes (6,4)" SLURM_NTASKS=10 SLURM_JOB_NUM_NODES=2 SLURM_TASKS_PER_NODE=6,4 \
    SLURM_GPUS_ON_NODE=4 -- "$gpu1"
refuse "--servers 2 does not fit the layout" "${job1[@]}" -- "$gpu1" --servers 2
refuse "--servers 3 does not fit the layout" "${job1[@]}" -- "$gpu1" -s3
refuse "give --serv as --servers in full" "${job1[@]}" -- "$gpu1" --serv 1
refuse "--mode auto may run the servers' tasks as workers" "${job1[@]}" -- "$gpu1" --mode auto
refuse "--mode allreduce has no servers" "${job1[@]}" -- "$gpu1" --mode=allreduce
refuse "PC_DISTRIBUTION=block would put all servers on the last nodes" SLURM_NTASKS=10 SLURM_JOB_NUM_NODES=2 \
    SLURM_GPUS_ON_NODE=4 PC_DISTRIBUTION=block -- "$gpu1"
refuse "PC_LAUNCHER must be srun or mpirun, not 'ssh'" "${job1[@]}" PC_LAUNCHER=ssh -- "$gpu1"
refuse "PC_SLURM_DRY_RUN must be 0 or 1" "${job1[@]}" PC_SLURM_DRY_RUN=yes -- "$gpu1"
refuse "PC_TRAIN='$tmp/no-such-file' is not an executable program" "${job1[@]}" PC_TRAIN="$tmp/no-such-file" -- "$gpu1"

# 8c. On the cluster: Slurm's own GPU handling, on the fake GPUs.
if [ "$fake_gpus" = 0 ]; then
    echo "skip: the GPU scripts under Slurm (this cluster has no GPUs: fake GPU devices could not be made)"
else
    if out=$(cd "$tmp" && timeout 30 sbatch --test-only "$gpu1" 2>&1) &&
        out2=$(cd "$tmp" && timeout 30 sbatch --test-only --nodes=1 "$gpun" 2>&1); then
        ok "sbatch --test-only: pc-train-gpu.sbatch as written; the multinode one on --nodes=1"
    else
        bad "sbatch --test-only of the GPU scripts"; echo "$out" "${out2:-}"
    fi
    # A probe in pc-train's place: what each task of the step sees and is given.
    printf '%s\n' '#!/bin/sh' \
        'echo "probe task=$SLURM_PROCID cvd=${CUDA_VISIBLE_DEVICES-unset} args=$*"' >"$tmp/probe"
    chmod +x "$tmp/probe"
    # As written (4 GPUs, 5 tasks), submitted from a tree: pc-train.sbatch is found there.
    (cd "$tmp/tree" && env -u PC_SBATCH PC_TRAIN="$tmp/probe" PC_CHECKPOINT_DIR="$tmp/ck8" timeout 120 \
        sbatch --wait --output="$tmp/job8.out" scripts/slurm/pc-train-gpu.sbatch --compress-on cpu >/dev/null)
    seen_want="cvd=0,1,2,3 args=--checkpoint-dir $tmp/ck8 --checkpoint-every 500 --resume --device cuda --servers 1 --compress-on cpu"
    if [ "$(grep -c -F -x -e "probe task=0 $seen_want" -e "probe task=1 $seen_want" -e "probe task=2 $seen_want" \
            -e "probe task=3 $seen_want" -e "probe task=4 $seen_want" "$tmp/job8.out")" = 5 ] &&
        [ "$(grep '^probe' "$tmp/job8.out" | cut -d' ' -f2 | sort | tr '\n' ' ')" = "task=0 task=1 task=2 task=3 task=4 " ]; then
        ok "pc-train-gpu.sbatch as written: 5 tasks (4 workers + 1 server), each sees CUDA_VISIBLE_DEVICES=0,1,2,3 and gets --device cuda --servers 1"
    else
        bad "pc-train-gpu.sbatch as written, with a probe"; cat "$tmp/job8.out"
    fi
    # Slurm's GPU binding: each task sees only its own GPU (the server's reuses the first).
    PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_TRAIN="$tmp/probe" PC_CHECKPOINT_DIR="$tmp/ck8" timeout 120 \
        sbatch --wait --gpu-bind=map_gpu:0,1,2,3 --output="$tmp/job8b.out" "$gpu1" >/dev/null
    seen=$(grep -o '^probe task=[0-9] cvd=[0-9,]*' "$tmp/job8b.out" | sort | tr '\n' ' ')
    if [ "$seen" = "probe task=0 cvd=0 probe task=1 cvd=1 probe task=2 cvd=2 probe task=3 cvd=3 probe task=4 cvd=0 " ]; then
        ok "with --gpu-bind=map_gpu:0,1,2,3 worker i sees only GPU i (its device 0)"
    else
        bad "--gpu-bind: what the tasks see"; cat "$tmp/job8b.out"
    fi
    # The multi-node script folded onto this node: 2 GPUs + 1 server, a dry run in the job.
    PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_SLURM_DRY_RUN=1 PC_CHECKPOINT_DIR="$tmp/ckd" timeout 120 \
        sbatch --wait --nodes=1 --ntasks-per-node=3 --gres=gpu:2 --output="$tmp/job8c.out" "$gpun" >/dev/null
    expect_dry "pc-train-gpu-multinode.sbatch in a job on 1 node, --gres=gpu:2, 3 tasks" "$(cat "$tmp/job8c.out")" \
        "${srun_words[@]}" -- --device cuda --servers 1
    # Bad input in a job: the job fails and its log (its own: logs are appended to) is the
    # one line.
    n8=0
    for case in "PC_GPUS=x|--gres=gpu:2 --ntasks=3|PC_GPUS='x' is not a positive integer" \
        "PC_GPUS=2|--gres=gpu:2 --ntasks=2|leave none for a server"; do
        IFS='|' read -r var opts text <<<"$case"
        n8=$((n8 + 1))
        log="$tmp/job8d-$n8.out"
        # shellcheck disable=SC2086 # opts: sbatch options, split on purpose
        env "$var" PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_CHECKPOINT_DIR="$tmp/ckd" timeout 60 \
            sbatch --wait $opts --output="$log" "$gpu1" >/dev/null 2>&1
        rc=$?
        if [ $rc != 0 ] && [ "$(wc -l <"$log")" = 1 ] && grep -q -F -- "$text" "$log"; then
            ok "job with $var, $opts: failed (status $rc) with one line: $(cat "$log")"
        else
            bad "job with $var, $opts: status $rc"; head -n 5 "$log"
        fi
    done
    # Training through the script as written, on the CPU through the GPU code path.
    if grep -q -- '--device cpu|cuda|emulate' <<<"$("$train" --help 2>&1)"; then
        if PC_SBATCH="$src/scripts/slurm/pc-train.sbatch" PC_CHECKPOINT_DIR="$tmp/ck8e" timeout 300 \
                sbatch --wait --output="$tmp/job8e.out" "$gpu1" "${short[@]}" --device emulate >/dev/null &&
            grep -q '^done: 60 iterations' "$tmp/job8e.out"; then
            ok "pc-train-gpu.sbatch as written with --device emulate: 4 workers + 1 server trained 60 iterations"
        else
            bad "pc-train-gpu.sbatch --device emulate"; grep -v '^  ' "$tmp/job8e.out" | tail -n 15
        fi
    else
        echo "skip: training through pc-train-gpu.sbatch (this pc-train has no --device emulate)"
    fi
fi

# 7. Every sbatch command in the docs, in its short form, on this cluster (tests/system/test_docs.sh
#    says how a command is shortened; the other documented commands run in make check).
PC_SRCDIR="$src" PC_BUILDDIR="$build" "$src/tests/system/test_docs.sh" --sbatch >"$tmp/docs.log" 2>&1
rc=$?
sed 's/^/  docs: /' "$tmp/docs.log"
case $rc in
0) ok "the documented sbatch commands ran" ;;
77) echo "skip: the documented sbatch commands (build not in $src/build)" ;;
*) bad "a documented sbatch command failed" ;;
esac

pc_done
