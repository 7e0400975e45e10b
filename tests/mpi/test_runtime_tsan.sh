#!/usr/bin/env bash
# The worker pipeline (backprop thread, compressor thread, SPSC queues, chunk versions)
# under ThreadSanitizer: pc_example from the TSan build, 1 worker + 1 server and 2 + 1,
# pipelined, writing a checkpoint every 7 iterations (the backprop thread then reads codec
# state the compressor thread wrote). Any data race in PipeCompress's code fails the run
# (halt_on_error). 2 + 1 runs a pool of two compressor threads per worker (--compressors 2,
# 4 KiB chunks, all compressed: tensors span both threads' lanes, whose releases, queues
# and MPI requests are each the lane's). Also the device-tensor path, --device emulate, and test_runtime_mpi's
# view and devstep modes (gradients as views, --dilate, the device step).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
ex="$PC_BUILDDIR/apps/examples/pc_example"
export TSAN_OPTIONS="suppressions=$PC_SRCDIR/tests/mpi/tsan.supp halt_on_error=1 exitcode=66 report_signal_unsafe=0"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for np in 2 3; do
    pool=()
    [ "$np" = 3 ] && pool=(--compressors 2 --chunk-bytes 4K --compress-min-bytes 0)
    out=$("$run" -t 300 -np "$np" "$ex" --iters 30 --hidden 64 --compress topk:ratio=0.05 "${pool[@]}" \
        --checkpoint-dir "$tmp/ck$np" --checkpoint-every 7 2>&1); rc=$?
    if [ "$rc" = 0 ] && ! grep -q "ThreadSanitizer" <<<"$out" && [ -e "$tmp/ck$np/ckpt-000000000028/MANIFEST" ]; then
        ok "pipelined runtime with checkpoints, np $np ${pool[*]}: no data race"
    else
        bad "np $np (rc $rc)"; grep -A30 "WARNING: ThreadSanitizer" <<<"$out" | sed -n 1,60p
    fi
done
# The device-tensor path (--device emulate: mirrors, copies, events, the device codec on
# the CPU), pipelined, with checkpoints (the device states go to the host and back).
out=$("$run" -t 300 -np 3 "$ex" --iters 30 --hidden 64 --compress topk:ratio=0.05 --device emulate \
    --checkpoint-dir "$tmp/ckdev" --checkpoint-every 7 2>&1); rc=$?
if [ "$rc" = 0 ] && ! grep -q "ThreadSanitizer" <<<"$out" && [ -e "$tmp/ckdev/ckpt-000000000028/MANIFEST" ]; then
    ok "device tensors (--device emulate), pipelined with checkpoints: no data race"
else
    bad "--device emulate (rc $rc)"; grep -A30 "WARNING: ThreadSanitizer" <<<"$out" | sed -n 1,60p
fi
# Gradients as views with a not_before (pc_worker_grad_ready_view: the compressor thread
# reads each tensor's view and time from its descriptor, and sleeps), under --dilate 2 (its
# sleeps on both threads and the server's), and the device step held on the compressor
# thread in allreduce mode.
mpi="$PC_BUILDDIR/tests/mpi/test_runtime_mpi"
for args in "-np 3 view --compress none --momentum 0 --lr 0.5 --pull dense --dilate 2" \
            "-np 2 view --mode allreduce" "-np 2 devstep --mode allreduce"; do
    np=$(awk '{print $2}' <<<"$args"); flags=${args#-np "$np" }
    # shellcheck disable=SC2086
    out=$("$run" -t 300 -np "$np" "$mpi" $flags 2>&1); rc=$?
    if [ "$rc" = 0 ] && ! grep -q "ThreadSanitizer" <<<"$out" && grep -q "parameters hash" <<<"$out"; then
        ok "test_runtime_mpi $flags: no data race"
    else
        bad "test_runtime_mpi $flags (rc $rc)"; grep -A30 "WARNING: ThreadSanitizer" <<<"$out" | sed -n 1,60p
    fi
done
pc_done
