#!/usr/bin/env bash
# pc_worker_destroy on a started worker that never finished: the workers hand over every
# gradient of the third iteration and destroy the worker at once (compressor thread
# running, updates in flight); destroy must stop and join the thread, settle the requests
# and free everything; the servers, left waiting, time out. Pipelined, inline and with a
# pool of three compressor threads (each stopped and joined, its lane freed), 2 workers
# and 1 server. Run in every build: the normal one, the ASan build (make check-asan: a leak
# or a use after free fails it) and the TSan build (make check-concurrency: a race fails it).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
mpi="$PC_BUILDDIR/tests/mpi/test_runtime_mpi"
export LSAN_OPTIONS="suppressions=$PC_SRCDIR/tests/mpi/lsan.supp fast_unwind_on_malloc=0"
export TSAN_OPTIONS="suppressions=$PC_SRCDIR/tests/mpi/tsan.supp halt_on_error=1 exitcode=66 report_signal_unsafe=0"
for pipe in on off pool; do
    flags=(--pipeline "$pipe")
    [ "$pipe" = pool ] && flags=(--pipeline on --compressors 3)
    out=$("$run" -t 120 -np 3 "$mpi" destroy --servers 1 --chunk-bytes 256 --timeout 3 \
        "${flags[@]}" --compress topk:ratio=0.1 2>&1); rc=$?
    if [ "$rc" = 0 ] && grep -q 'destroyed their started workers' <<<"$out" \
        && grep -q 'timed out as expected' <<<"$out" && ! grep -q 'Sanitizer' <<<"$out"; then
        ok "destroy without finish, ${flags[*]}: clean"
    else
        bad "destroy without finish, ${flags[*]} (rc $rc)"
        grep -E -A30 'Sanitizer|test_runtime_mpi' <<<"$out" | sed -n 1,60p
    fi
done
pc_done
