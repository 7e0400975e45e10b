#!/usr/bin/env bash
# MPI integration: placement over 3 ranks, then 1 rank (see tests/mpi/test_comm.c).
set -euo pipefail
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
"$run" -t 60 -np 3 "$PC_BUILDDIR/tests/mpi/test_comm"
"$run" -t 60 -np 1 "$PC_BUILDDIR/tests/mpi/test_comm"
