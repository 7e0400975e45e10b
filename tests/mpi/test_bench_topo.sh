#!/usr/bin/env bash
# MPI smoke test of a program: `pc-bench topo` under mpirun prints each rank's role and
# verified placement; bad flags fail with exit 2 and a one-line message.
set -euo pipefail
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
bench="$PC_BUILDDIR/apps/pc-bench"
out=$("$run" -t 60 -np 3 "$bench" topo --servers 1 2>&1)
echo "$out"
grep -q '^rank 0 worker ' <<<"$out"
grep -q '^rank 1 worker ' <<<"$out"
grep -q '^rank 2 server ' <<<"$out"
[ "$(grep -c ' verified$' <<<"$out")" = 3 ]
grep -q 'placement: 5 threads of 3 ranks' <<<"$out"
# Impossible split: every rank says why, the job exits non-zero.
if out=$("$run" -t 60 -np 2 "$bench" topo --servers 2 2>&1); then
    echo "expected --servers 2 with 2 ranks to fail"; exit 1
fi
grep -q -- '--servers 2 leaves no worker among 2 ranks' <<<"$out"
# Usage errors: exit status 2, one line naming the flag.
set +e
msg=$("$bench" topo --servers x 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || { echo "expected exit 2, got $rc"; exit 1; }
[ "$msg" = "pc-bench: --servers: 'x' is not an integer" ] || { echo "got: $msg"; exit 1; }
set +e
msg=$("$bench" nosuch 2>&1); rc=$?
set -e
[ "$rc" = 2 ] && grep -q "unknown benchmark 'nosuch'" <<<"$msg"
