#!/usr/bin/env bash
# MPI smoke test of a program: `pc-bench topo` under mpirun prints each rank's role and
# verified placement; bad flags fail with exit 2 and a one-line message.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
bench="$PC_BUILDDIR/apps/pc-bench"
out=$("$run" -t 60 -np 3 "$bench" topo --servers 1 2>&1)
echo "$out"
if grep -q '^rank 0 worker ' <<<"$out" && grep -q '^rank 1 worker ' <<<"$out" &&
    grep -q '^rank 2 server ' <<<"$out" && [ "$(grep -c ' verified$' <<<"$out")" = 3 ] &&
    grep -q 'placement: 5 threads of 3 ranks' <<<"$out"; then
    ok "pc-bench topo, 3 ranks: two workers and a server, each placement verified"
else
    bad "pc-bench topo, 3 ranks: roles or placements missing"
fi
# Impossible split: every rank says why, the job exits non-zero.
out=$("$run" -t 60 -np 2 "$bench" topo --servers 2 2>&1)
rc=$?
if [ "$rc" != 0 ] && grep -q -- '--servers 2 leaves no worker among 2 ranks' <<<"$out"; then
    ok "--servers 2 with 2 ranks: refused (status $rc)"
else
    bad "--servers 2 with 2 ranks: status $rc"; tail -n 3 <<<"$out"
fi
# Usage errors: exit status 2, one line naming the flag.
msg=$("$bench" topo --servers x 2>&1)
rc=$?
if [ "$rc" = 2 ] && [ "$msg" = "pc-bench: --servers: 'x' is not an integer" ]; then
    ok "--servers x: status 2, $msg"
else
    bad "--servers x: status $rc (expected 2), got: $msg"
fi
msg=$("$bench" nosuch 2>&1)
rc=$?
if [ "$rc" = 2 ] && grep -q "unknown benchmark 'nosuch'" <<<"$msg"; then
    ok "unknown benchmark: status 2"
else
    bad "unknown benchmark: status $rc, got: $msg"
fi
pc_done
