#!/usr/bin/env bash
# MPI integration: placement over 3 ranks, then 1 rank (see tests/mpi/test_comm.c).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
for np in 3 1; do
    if "$run" -t 60 -np "$np" "$PC_BUILDDIR/tests/mpi/test_comm"; then
        ok "test_comm under mpirun -np $np"
    else
        bad "test_comm under mpirun -np $np"
    fi
done
pc_done
