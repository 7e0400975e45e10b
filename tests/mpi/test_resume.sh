#!/usr/bin/env bash
# Checkpoint and resume, end to end under mpirun (pc-train on synthetic data):
#  - kill -9 every rank mid-run after a checkpoint; --resume finishes the run and saves
#    bitwise the model of an uninterrupted run (parameter servers, top-k, pipelined; and
#    the dense allreduce baseline, whose workers hold the parameters; powersgd, whose
#    workers hold the residual and Q, also in the device codec's states of --device
#    emulate --compress-on gpu);
#  - SIGTERM to every rank: all stop at one iteration with exit status 143 after a final
#    checkpoint, and --resume again gives the uninterrupted model (what a Slurm time limit
#    or pre-emption does);
#  - a corrupted newest checkpoint is reported and the previous complete one is used;
#  - a checkpoint of another model or world size is never loaded;
#  - --optimizer adamw and adam: the servers' (and allreduce's workers', powersgd's
#    workers') m, v, vmax and step counts come back bitwise (the uninterrupted model
#    again; with --adam-moments lazy and --adam-freeze-after too); a checkpoint written
#    with another optimizer is refused in one line;
#  - --update workers (adamw, top-k with error feedback): the workers' parameters, m, v and
#    steps come back bitwise from the workers' files, the servers' hold no records.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
tmp=$(mktemp -d)
# A background job still running at exit (a failed step): kill its tree, by pid.
trap 'for j in $(jobs -p); do pc_kill_tree "$j"; done; rm -rf "$tmp"' EXIT

# 2 workers x batch 16 over 20000 samples: 625 iterations per epoch, 1250 in all: a
# checkpoint every 200 leaves the signal about a thousand iterations to land in.
common=(--data synthetic --synthetic-samples 20000 --batch 16 --epochs 2 --lr 0.01 --log-level warn)

# interrupted NAME SIGNAL FLAGS...: reference run, then a run hit by SIGNAL on every rank
# once a checkpoint exists, then --resume to the end; the two saved models must be equal.
interrupted() {
    local name=$1 sig=$2
    shift 2
    local ck="$tmp/$name-ck"
    "$run" -t 240 -np 3 "$train" "${common[@]}" "$@" --save-model "$tmp/$name-ref.pcm" \
        >"$tmp/$name-ref.log" 2>&1 || { bad "$name: reference run failed"; tail -5 "$tmp/$name-ref.log"; return; }
    "$run" -t 240 -np 3 "$train" "${common[@]}" "$@" --checkpoint-dir "$ck" --checkpoint-every 200 \
        --save-model "$tmp/$name-cut.pcm" >"$tmp/$name-cut.log" 2>&1 &
    local pid=$!
    if ! pc_await_manifest "$ck" 120; then
        bad "$name: no checkpoint appeared"; pc_kill_tree $pid; wait $pid; return
    fi
    # the ranks only, not mpirun or timeout (Slurm signals tasks)
    local ranks
    ranks=$(pc_ranks $pid "$train" 3)
    # shellcheck disable=SC2086
    [ -n "$ranks" ] && kill "-$sig" $ranks
    wait $pid
    local rc=$?
    if grep -q "^done:" "$tmp/$name-cut.log"; then
        bad "$name: the run finished before SIG$sig reached it (make it longer)"; return
    fi
    if [ "$sig" = TERM ]; then
        local at
        at=$(grep -o 'stopped by signal 15 after [0-9]* iterations (checkpoint written)' "$tmp/$name-cut.log" | awk '{print $6}')
        if [ "$rc" = 143 ] && [ -n "$at" ] && [ -e "$ck/ckpt-$(printf %012d "$at")/MANIFEST" ]; then
            ok "$name: SIGTERM stopped every rank at iteration $at with status 143 and a final checkpoint"
        else
            bad "$name: SIGTERM: status $rc, stop line '$at'"; tail -5 "$tmp/$name-cut.log"; return
        fi
    fi
    "$run" -t 240 -np 3 "$train" "${common[@]}" "$@" --checkpoint-dir "$ck" --checkpoint-every 200 \
        --resume --save-model "$tmp/$name-res.pcm" --log-level info >"$tmp/$name-res.log" 2>&1 \
        || { bad "$name: resume run failed"; tail -5 "$tmp/$name-res.log"; return; }
    local from
    from=$(grep -o 'resuming from the checkpoint of iteration [0-9]*' "$tmp/$name-res.log" | awk '{print $7}')
    if [ -n "$from" ] && [ "$from" -gt 0 ] && cmp -s "$tmp/$name-ref.pcm" "$tmp/$name-res.pcm"; then
        ok "$name: SIG$sig mid-run, resumed at iteration $from: model bitwise identical to the uninterrupted run"
    else
        bad "$name: resumed at '$from'; models differ or missing"; tail -5 "$tmp/$name-res.log"
    fi
}

interrupted ps-topk KILL --compress topk:ratio=0.01 --compress-min-bytes 0
interrupted allreduce KILL --mode allreduce --compress none
interrupted ps-term TERM --compress dgc:ratio=0.01 --compress-min-bytes 0
# powersgd: the residual and Q (the warm start) of every matrix come back from the file:
# with SGD here, M in the device codec's states (pc_devcodec's CPU path: their Q and residual
# go to the checkpoint and back through pc_devcodec_state_get/_set(_q)); the host codec's
# residual and Q with ps-powersgd-adamw below (a case of its own with SGD repeated both).
interrupted ps-powersgd-dev KILL --compress powersgd:rank=2,warmup=20 --device emulate \
    --compress-on gpu
# Adam's state: m, v, vmax and the step count on the servers (amsgrad, with the lazy
# moments of the sparse path), on the workers of allreduce, and on both for powersgd's
# matrices (each worker steps its copy as the server; v frozen after 150 steps: frozen in
# the checkpoint of 200 and after it). Not v frozen with top-k: the entries that never
# arrived before the freeze keep v = 0 and step lr * m / eps when they do (diverges).
# The top-k case's density warm-up (500 of its 1250 iterations) spans the checkpoint it
# resumes from: each chunk's count of compress calls comes back from the file.
adam=(--lr 0.001 --weight-decay 0.01)
interrupted ps-adamw KILL --compress topk:ratio=0.01,momentum=0,warmup=500 --compress-min-bytes 0 \
    --optimizer adamw --amsgrad --adam-moments lazy "${adam[@]}"
interrupted allreduce-adam KILL --mode allreduce --compress none --optimizer adam "${adam[@]}"
interrupted ps-powersgd-adamw KILL --compress powersgd:rank=2,warmup=20 --optimizer adamw \
    --adam-freeze-after 150 "${adam[@]}"
# Resuming adamw's checkpoints with sgd (and sgd's with adamw) is refused with one line.
out=$("$run" -t 120 -np 3 "$train" "${common[@]}" --compress topk:ratio=0.01,momentum=0 \
    --compress-min-bytes 0 --checkpoint-dir "$tmp/ps-adamw-ck" --resume 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c "holds checkpoints of another job (iteration [0-9]*: a different configuration ('[^']* optimizer=adamw+amsgrad'; this job '[^' ]* [^' ]* min-bytes=0 seed=[0-9]*')" <<<"$out")" = 1 ]; then
    ok "adamw's checkpoint resumed with sgd: refused in one line (status $rc)"
else
    bad "adamw's checkpoint resumed with sgd: status $rc"; grep -i checkpoint <<<"$out" | sed -n 1,5p
fi
out=$("$run" -t 120 -np 3 "$train" "${common[@]}" --mode allreduce --compress none \
    --optimizer adamw --checkpoint-dir "$tmp/allreduce-ck" --resume 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c "holds checkpoints of another job (iteration [0-9]*: a different configuration ('allreduce none min-bytes=[0-9]* seed=[0-9]*'; this job 'allreduce none min-bytes=[0-9]* seed=[0-9]* optimizer=adamw')" <<<"$out")" = 1 ]; then
    ok "sgd's checkpoint resumed with adamw: refused in one line (status $rc)"
else
    bad "sgd's checkpoint resumed with adamw: status $rc"; grep -i checkpoint <<<"$out" | sed -n 1,5p
fi

# --update workers: the workers checkpoint the parameters and the optimizer's state, the
# servers nothing but their header. The newest checkpoint removed, --resume from the one
# before it ends bitwise where the run that wrote them ended. (warmup=0: AdamW's default
# would send every entry for 1000 iterations, and the codec's residual would stay 0.)
ck="$tmp/upd-ck"
upd=(--data synthetic --synthetic-samples 3000 --batch 16 --iters 40 --lr 0.003 --log-level warn
    --update workers --compress topk:ratio=0.01,momentum=0,warmup=0 --compress-min-bytes 0
    --optimizer adamw --weight-decay 0.01 --checkpoint-dir "$ck" --checkpoint-every 20)
"$run" -t 120 -np 3 "$train" "${upd[@]}" --save-model "$tmp/u-ref.pcm" >"$tmp/u-ref.log" 2>&1 ||
    bad "update workers: first run failed"
srv=$(stat -c %s "$ck/ckpt-000000000020/rank-2.bin" 2>/dev/null)
rm -rf "$ck/ckpt-000000000040"
"$run" -t 120 -np 3 "$train" "${upd[@]}" --resume --log-level info --save-model "$tmp/u-res.pcm" \
    >"$tmp/u-res.log" 2>&1 || bad "update workers: resume run failed"
if grep -q 'resuming from the checkpoint of iteration 20' "$tmp/u-res.log" && [ "$srv" = 32 ] &&
    cmp -s "$tmp/u-ref.pcm" "$tmp/u-res.pcm"; then
    ok "--update workers: resumed at iteration 20 bitwise (the server's file: its 32-byte header)"
else
    bad "--update workers resume: server file '$srv' bytes"; tail -3 "$tmp/u-res.log"
fi

# A corrupted newest checkpoint: reported, the previous one used, same final model.
ck="$tmp/corrupt-ck"
short=(--data synthetic --synthetic-samples 3000 --batch 16 --iters 150 --lr 0.01 --log-level warn)
"$run" -t 120 -np 3 "$train" "${short[@]}" --checkpoint-dir "$ck" --checkpoint-every 50 \
    --save-model "$tmp/c-ref.pcm" >"$tmp/c-ref.log" 2>&1 || bad "corrupt: first run failed"
newest="$ck/ckpt-000000000150/rank-2.bin"
if [ -e "$newest" ] && [ -e "$ck/ckpt-000000000100/MANIFEST" ]; then
    printf '\x55' | dd of="$newest" bs=1 seek=1000 conv=notrunc status=none
    "$run" -t 120 -np 3 "$train" "${short[@]}" --checkpoint-dir "$ck" --checkpoint-every 50 \
        --resume --save-model "$tmp/c-res.pcm" --log-level info >"$tmp/c-res.log" 2>&1 \
        || bad "corrupt: resume run failed"
    if grep -q 'skipping checkpoint of iteration 150: .*rank-2.bin: CRC mismatch' "$tmp/c-res.log" &&
        grep -q 'resuming from the checkpoint of iteration 100' "$tmp/c-res.log" &&
        cmp -s "$tmp/c-ref.pcm" "$tmp/c-res.pcm"; then
        ok "corrupted newest checkpoint: reported, resumed from the previous one, identical model"
    else
        bad "corrupted checkpoint handling"; grep -i 'checkpoint' "$tmp/c-res.log" | sed -n 1,5p
    fi
else
    bad "corrupt: expected checkpoints 100 and 150 (keep 2), got: $(ls "$ck")"
fi

# Another world size, and another model: never loaded and never deleted; --resume (and a
# fresh run, which would overwrite them) is refused with one line naming what differs.
before=$(find "$ck" -type f | sort | xargs cksum)
out=$("$run" -t 120 -np 4 "$train" "${short[@]}" --checkpoint-dir "$ck" --resume --iters 10 2>&1)
rc=$?
# The workers agree on it: the reason once (worker 0's), no "worker rN:" line per worker.
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
    [ "$(grep -c "holds checkpoints of another job (iteration 150: written by 2 workers + 1 servers; this job has 3 + 1)" <<<"$out")" = 1 ] &&
    ! grep -q "could not set up checkpoints\|worker r[12]:" <<<"$out" &&
    [ "$(find "$ck" -type f | sort | xargs cksum)" = "$before" ]; then
    ok "--resume into another world size's checkpoints: refused once (status $rc), nothing deleted"
else
    bad "world-size mismatch: status $rc"; grep -i checkpoint <<<"$out" | sed -n 1,5p; ls "$ck"
fi
out=$("$run" -t 120 -np 4 "$train" "${short[@]}" --checkpoint-dir "$ck" --iters 120 --checkpoint-every 50 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c "holds checkpoints of another job" <<<"$out")" = 1 ] &&
    [ "$(find "$ck" -type f | sort | xargs cksum)" = "$before" ]; then
    ok "a fresh run into another job's checkpoint directory: refused, nothing overwritten"
else
    bad "fresh run into another job's directory: status $rc"; ls "$ck"
fi
ck2="$tmp/model-ck"
"$run" -t 120 -np 3 "$train" "${short[@]}" --iters 20 --checkpoint-dir "$ck2" >/dev/null 2>&1
out=$("$run" -t 120 -np 3 "$train" "${short[@]}" --model cnn --iters 2 --checkpoint-dir "$ck2" --resume 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q 'another job (iteration 20: a different model or chunk plan' <<<"$out"; then
    ok "a checkpoint of another model: refused with its reason"
else
    bad "model mismatch not reported (status $rc)"; grep -i checkpoint <<<"$out" | sed -n 1,5p
fi

# Bad flags: a checkpoint directory that cannot be created fails with one line.
out=$("$run" -t 60 -np 3 "$train" "${short[@]}" --checkpoint-dir /proc/nope/ck 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -qF -- "pc-train: --checkpoint-dir: '/proc/nope/ck': cannot create '/proc/nope'" <<<"$out"; then
    ok "unwritable --checkpoint-dir: one clear error, status $rc"
else
    bad "unwritable --checkpoint-dir: status $rc"; tail -3 <<<"$out"
fi

out=$("$run" -t 60 -np 3 "$train" "${short[@]}" --resume 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "pc-train: --resume needs --checkpoint-dir DIR" <<<"$out"; then
    ok "--resume without --checkpoint-dir: usage error, status 2"
else
    bad "--resume without --checkpoint-dir: status $rc"; tail -3 <<<"$out"
fi

pc_done
