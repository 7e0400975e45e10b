#!/usr/bin/env bash
# Stopping a job through its launcher (what Ctrl-C, kill and a batch system do):
#  - SIGTERM or SIGINT to scripts/pc-mpirun.sh reaches the ranks, which stop together at
#    an iteration boundary after a final checkpoint; the launcher exits 128 + N (it once
#    exited 1, because mpirun itself was signalled and aborted the job);
#  - a stopped run does not write --save-model (its parameters are not the trained model);
#  - no Open MPI "Epoll MOD ... Bad file descriptor" warnings (mpirun is not signalled);
#  - --resume from that checkpoint finishes the run;
#  - a rank killed by SIGKILL is named by the launcher (which rank, how), and the time
#    limit only when it is what ended the job.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
tmp=$(mktemp -d)
job=
trap '[ -n "$job" ] && pc_kill_tree "$job"; rm -rf "$tmp"' EXIT
# Job control: the launcher gets its own process group, as under an interactive shell, and
# SIGINT is not ignored in it (a non-interactive shell starts background jobs so).
set -m
# And SIGINT back to its default for the launcher in any case: a shell started with SIGINT
# ignored (this test under a CI job started in the background, or under nohup) passes that
# on, and a signal ignored when a shell starts cannot be trapped there, so the launcher's
# trap would never run (seen: the SIGINT job ran to its end, status 0).
default_int=(env --default-signal=INT)

common=(--data synthetic --synthetic-samples 6000 --batch 16 --lr 0.01 --log-level warn)
for sig in TERM INT; do
    ck="$tmp/ck-$sig"
    "${default_int[@]}" "$run" -t 300 -np 3 "$train" "${common[@]}" --epochs 1000 \
        --checkpoint-dir "$ck" \
        --save-model "$tmp/m-$sig.pcm" >"$tmp/$sig.log" 2>&1 &
    job=$!
    # Until the first epoch's end (generous: the machine may be loaded); a signal before the
    # ranks run would test the launcher's start-up instead.
    for _ in $(seq 1200); do grep -q '^epoch 1:' "$tmp/$sig.log" && break; sleep 0.1; done
    grep -q '^epoch 1:' "$tmp/$sig.log" || bad "SIG$sig: the job did not reach its first epoch's end in 120 s"
    kill "-$sig" "$job"
    wait "$job"
    rc=$?
    job=
    want=$((128 + $(kill -l "$sig")))
    at=$(grep -o "stopped by signal $(kill -l "$sig") after [0-9]* iterations (checkpoint written)" "$tmp/$sig.log" | awk '{print $6}')
    if [ "$rc" = "$want" ] && [ -n "$at" ] && [ -e "$ck/ckpt-$(printf %012d "$at")/MANIFEST" ] &&
        [ ! -e "$tmp/m-$sig.pcm" ] && grep -q 'not written: training did not finish' "$tmp/$sig.log" &&
        ! grep -q 'Epoll' "$tmp/$sig.log"; then
        ok "SIG$sig to the launcher: status $rc, every rank stopped at iteration $at with a checkpoint, no model file"
    else
        bad "SIG$sig to the launcher: status $rc (want $want), stop line '$at', model file: $(ls "$tmp"/m-"$sig".pcm 2>&1)"
        tail -5 "$tmp/$sig.log"
    fi
done

# A rank killed by SIGKILL (the OOM killer, kill -9): the launcher says which rank died and
# how, in a line of its own, and does not blame the time limit (mpirun's status, 137, is
# also timeout's after its KILL). Then the time limit itself, said as such.
"$run" -t 300 -np 3 "$train" "${common[@]}" --epochs 1000 >"$tmp/kill.log" 2>&1 &
job=$!
for _ in $(seq 1200); do grep -q '^epoch 1/' "$tmp/kill.log" && break; sleep 0.1; done
victim=
for p in $(pc_ranks "$job" "$train" 3); do
    grep -qx 'OMPI_COMM_WORLD_RANK=1' <<<"$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)" && victim=$p
done
if [ -n "$victim" ]; then
    kill -KILL "$victim"
    wait "$job"
    rc=$?
    job=
    if [ "$rc" = 137 ] &&
        grep -Eq '^pc-mpirun.sh: rank 1 on \S+ was killed by signal 9, SIGKILL \(the OOM killer, or kill -9\); mpirun then stopped the other ranks \(exit status 137\)$' "$tmp/kill.log" &&
        ! grep -q 'time limit' "$tmp/kill.log"; then
        ok "kill -9 of rank 1: status 137, $(grep '^pc-mpirun.sh: ' "$tmp/kill.log")"
    else
        bad "kill -9 of rank 1: status $rc"; grep -v '^  ' "$tmp/kill.log" | tail -6
    fi
else
    bad "rank 1 of the job not found"; pc_kill_tree "$job"; job=
fi
"$run" -t 3 -np 3 "$train" "${common[@]}" --epochs 1000 >"$tmp/limit.log" 2>&1
rc=$?
if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } &&
    grep -q '^pc-mpirun.sh: the time limit of 3 s ended the job (-t SECONDS raises it)$' "$tmp/limit.log" &&
    ! grep -q 'was killed by signal' "$tmp/limit.log"; then
    ok "-t 3: status $rc, the time limit named"
else
    bad "-t 3: status $rc"; tail -3 "$tmp/limit.log"
fi

# The stopped run resumes and finishes; only then is the model written.
if "$run" -t 120 -np 3 "$train" "${common[@]}" --iters "$((at + 20))" --checkpoint-dir "$tmp/ck-INT" --resume \
        --save-model "$tmp/m-INT.pcm" >"$tmp/resume.log" 2>&1 && [ -s "$tmp/m-INT.pcm" ] &&
    grep -q "^done: $((at + 20)) iterations" "$tmp/resume.log"; then
    ok "--resume after the stop: finished at iteration $((at + 20)), model written"
else
    bad "resume after a stop"; tail -5 "$tmp/resume.log"
fi

pc_done
