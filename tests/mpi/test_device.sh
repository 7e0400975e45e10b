#!/usr/bin/env bash
# Device tensors in the runtime (--device), through pc_gpu's host emulation where there is
# no GPU (--device emulate: host memory handled as device memory, so the mirrors, copies,
# events, the device codec's fold and compress and the checkpointed device states all run):
#  - exact aggregation of known gradients with device tensors, pipelined and inline, and
#    the copies, events and stream waits each iteration needs (pc_gpu_stats);
#  - pc-train saves bitwise the same model with --device cpu and --device emulate, with
#    --compress-on gpu and cpu, pipelined and inline, for topk, dgc and --mode allreduce
#    (the device path changes where data is, never the arithmetic);
#  - a checkpointed run resumed with device tensors equals the same on the CPU;
#  - bad flags fail with one clear line: --device cuda without a usable device (the
#    runtime's reason), --gpu without --device cuda, --compress-on with host tensors or
#    allreduce, a malformed --gpu, --mode auto with device tensors.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
mpi="$PC_BUILDDIR/tests/mpi/test_runtime_mpi"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for args in "-np 3 --servers 1 --chunk-bytes 64" "-np 4 --servers 2 --chunk-bytes 256"; do
    np=$(awk '{print $2}' <<<"$args"); flags=${args#-np $np }
    for pipe in on off; do
        # shellcheck disable=SC2086
        if out=$("$run" -t 60 -np "$np" "$mpi" exact $flags --pipeline "$pipe" --compress none \
                 --momentum 0 --lr 0.5 --pull dense --device emulate 2>&1) \
           && grep -q 'match bit for bit' <<<"$out" && grep -q 'device: copies' <<<"$out"; then
            ok "device tensors: exact aggregation and bookkeeping, np $np $flags --pipeline $pipe"
        else
            bad "device tensors: exact aggregation, np $np $flags --pipeline $pipe"; echo "$out" | tail -5
        fi
    done
done

short=(--data synthetic --synthetic-samples 1200 --batch 16 --iters 12 --lr 0.01 --model mlp
       --log-level warn)
# train NAME NP FLAGS...: pc-train saving $tmp/NAME.pcm.
train() {
    local name=$1 np=$2
    shift 2
    "$run" -t 120 -np "$np" "$train" "${short[@]}" "$@" --save-model "$tmp/$name.pcm" \
        >"$tmp/$name.log" 2>&1 || { bad "pc-train $* failed"; tail -3 "$tmp/$name.log"; }
}
same() { # same A B TEXT
    if cmp -s "$tmp/$1.pcm" "$tmp/$2.pcm"; then ok "$3"; else bad "$3: the models differ"; fi
}
for codec in topk:ratio=0.05 dgc:ratio=0.05; do
    c=${codec%%:*}
    train "$c-cpu" 3 --compress "$codec" --chunk-bytes 64K
    for on in gpu cpu; do
        for pipe in on off; do
            train "$c-$on-$pipe" 3 --compress "$codec" --chunk-bytes 64K --device emulate \
                --compress-on "$on" --pipeline "$pipe"
            same "$c-cpu" "$c-$on-$pipe" \
                "$c: --device emulate --compress-on $on --pipeline $pipe equals --device cpu"
        done
    done
done
# where the models were made: --compress-on gpu gives chunks device states, cpu none
train where-gpu 3 --compress topk:ratio=0.05 --chunk-bytes 64K --device emulate --log-level debug
train where-cpu 3 --compress topk:ratio=0.05 --chunk-bytes 64K --device emulate --compress-on cpu \
    --log-level debug
if grep -qE 'device codec on the emulated device: [1-9][0-9]* of ' "$tmp/where-gpu.log" &&
    grep -q 'device codec on the emulated device: 0 of ' "$tmp/where-cpu.log"; then
    ok "topk: --compress-on gpu folds and compresses in the device codec, cpu in none"
else
    bad "topk: the device codec's chunk count"; grep 'device codec' "$tmp"/where-*.log
fi
train gpu-auto 3 --compress topk:ratio=0.05 --chunk-bytes 64K --device emulate --gpu auto
same topk-cpu gpu-auto "--gpu auto (the default, given) is accepted with --device emulate"
train ar-cpu 2 --mode allreduce
train ar-emu 2 --mode allreduce --device emulate
same ar-cpu ar-emu "--mode allreduce: --device emulate equals --device cpu"

# Resume: the device codec's states (residual, momentum, steps) go through the checkpoint.
for dev in cpu emulate; do
    "$run" -t 120 -np 3 "$train" "${short[@]}" --compress dgc:ratio=0.05 --device "$dev" \
        --checkpoint-dir "$tmp/ck-$dev" --iters 6 >"$tmp/ck-$dev.log" 2>&1 \
        || bad "checkpointed run, --device $dev"
    "$run" -t 120 -np 3 "$train" "${short[@]}" --compress dgc:ratio=0.05 --device "$dev" \
        --checkpoint-dir "$tmp/ck-$dev" --resume --save-model "$tmp/resumed-$dev.pcm" \
        >"$tmp/resumed-$dev.log" 2>&1 || bad "resumed run, --device $dev"
done
grep -q 'resumed at iteration 6' "$tmp/resumed-emulate.log" \
    && same resumed-cpu resumed-emulate "dgc resumed from a checkpoint: --device emulate equals cpu" \
    || bad "the --device emulate run did not resume"

# The GPU check's pipeline measurement, through the emulation: e2e.sh --device with an
# existing build, --compress-on gpu and cpu, and gpu_train_report.py's lines on them.
for on in gpu cpu; do
    modes="1 3 4"
    [ $on = cpu ] && modes="3 4"
    "$PC_SRCDIR/scripts/bench/e2e.sh" --build "$PC_BUILDDIR" --device emulate --compress-on $on \
        --models mlp --nets shm --workers 1 --batch 16 --iters 4 --warmup 1 --modes "$modes" \
        --out "$tmp/e2e-$on" >"$tmp/e2e-$on.log" 2>&1 || { bad "e2e.sh --device emulate --compress-on $on"; tail -3 "$tmp/e2e-$on.log"; }
done
if out=$(python3 "$PC_SRCDIR/scripts/gpu/gpu_train_report.py" --e2e "$tmp/e2e-gpu/e2e.json" \
         "$tmp/e2e-cpu/e2e.json" 2>&1) && [ "$(grep -c 'hidden fraction (T3 - T4)' <<<"$out")" = 2 ] &&
   [ "$(grep -c 'over the dense allreduce' <<<"$out")" = 2 ] &&
   grep -q '"device": "emulate, compress on cpu"' "$tmp/e2e-cpu/runs/mlp-shm-w1-m4.meta.json"; then
    ok "e2e.sh --device emulate with --compress-on gpu and cpu, and gpu_train_report.py"
else
    bad "e2e.sh / gpu_train_report.py"; echo "$out"
fi

# Bad flags: one line naming the problem, non-zero exit.
expect_fail() { # expect_fail PATTERN NP FLAGS...
    local pat=$1 np=$2 out rc
    shift 2
    out=$("$run" -t 60 -np "$np" "$train" "${short[@]}" "$@" 2>&1); rc=$?
    if [ "$rc" != 0 ] && grep -q -- "$pat" <<<"$out"; then
        ok "$* fails: $(grep -m1 -- "$pat" <<<"$out")"
    else
        bad "$*: rc $rc, no '$pat'"; tail -3 <<<"$out"
    fi
}
# Without a usable device (CI) --device cuda must fail with the runtime's reason, said once
# (every rank has it; rank 0 prints it); on a GPU
# machine it trains (scripts/gpu-check.sh covers that).
out=$("$run" -t 60 -np 3 "$train" "${short[@]}" --device cuda 2>&1); rc=$?
if [ "$rc" = 0 ]; then
    echo "skipped: --device cuda without a device (this machine has one)"
elif grep -q -- "--device cuda: .*CUDA" <<<"$out" && [ "$(grep -c '^pc-train:' <<<"$out")" = 1 ]; then
    ok "--device cuda without a device fails: $(grep -m1 -- '--device cuda' <<<"$out")"
else
    bad "--device cuda without a device: rc $rc"; tail -3 <<<"$out"
fi
expect_fail "--gpu 1 needs --device cuda" 3 --gpu 1
expect_fail "--compress-on needs device tensors" 3 --compress-on cpu
expect_fail "--compress-on has no effect with --mode allreduce" 2 --mode allreduce --device emulate --compress-on gpu
expect_fail "--gpu: '0,x'" 3 --device cuda --gpu 0,x
expect_fail "--device emulate with --mode auto" 3 --device emulate --mode auto
pc_done
