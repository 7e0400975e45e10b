#!/usr/bin/env bash
# The worker pipeline (backprop thread, compressor thread, SPSC queues, chunk versions)
# under ThreadSanitizer: pc_example from the TSan build, 1 worker + 1 server and 2 + 1,
# pipelined, writing a checkpoint every 7 iterations (the backprop thread then reads codec
# state the compressor thread wrote). Any data race in PipeCompress's code fails the run
# (halt_on_error). Also the device-tensor path, --device emulate.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
ex="$PC_BUILDDIR/apps/examples/pc_example"
export TSAN_OPTIONS="suppressions=$PC_SRCDIR/tests/mpi/tsan.supp halt_on_error=1 exitcode=66 report_signal_unsafe=0"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for np in 2 3; do
    out=$("$run" -t 300 -np "$np" "$ex" --iters 30 --hidden 64 --compress topk:ratio=0.05 \
        --checkpoint-dir "$tmp/ck$np" --checkpoint-every 7 2>&1); rc=$?
    if [ "$rc" = 0 ] && ! grep -q "ThreadSanitizer" <<<"$out" && [ -e "$tmp/ck$np/ckpt-000000000028/MANIFEST" ]; then
        ok "pipelined runtime with checkpoints, np $np: no data race"
    else
        bad "np $np (rc $rc)"; grep -A30 "WARNING: ThreadSanitizer" <<<"$out" | head -60
    fi
done
# The device-tensor path (--device emulate: mirrors, copies, events, the device codec on
# the CPU), pipelined, with checkpoints (the device states go to the host and back).
out=$("$run" -t 300 -np 3 "$ex" --iters 30 --hidden 64 --compress topk:ratio=0.05 --device emulate \
    --checkpoint-dir "$tmp/ckdev" --checkpoint-every 7 2>&1); rc=$?
if [ "$rc" = 0 ] && ! grep -q "ThreadSanitizer" <<<"$out" && [ -e "$tmp/ckdev/ckpt-000000000028/MANIFEST" ]; then
    ok "device tensors (--device emulate), pipelined with checkpoints: no data race"
else
    bad "--device emulate (rc $rc)"; grep -A30 "WARNING: ThreadSanitizer" <<<"$out" | head -60
fi
pc_done
