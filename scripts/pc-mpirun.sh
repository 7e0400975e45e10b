#!/usr/bin/env bash
# pc-mpirun.sh: start an MPI job the way PipeCompress tests, scripts and demos need it.
#   scripts/pc-mpirun.sh [-t SECONDS] -np N PROGRAM [ARGS...]
# - always under `timeout` (default 120 s): a hung job fails instead of hanging CI;
# - as root, the two Open MPI variables that allow it;
# - oversubscription allowed, and Open MPI told to yield when idle (more ranks than cores
#   would otherwise busy-poll);
# - --bind-to none: PipeCompress binds its own threads (pc_topo);
# - single node: shared memory between ranks, control channel on loopback.
# MPIRUN (the configure-detected mpirun) and PC_MPIRUN_ARGS (extra mpirun flags) are honoured.
set -euo pipefail
limit=120
if [ "${1:-}" = "-t" ]; then
    limit=$2
    shift 2
fi
if [ "${1:-}" != "-np" ] || [ -z "${2:-}" ] || [ -z "${3:-}" ]; then
    echo "usage: $0 [-t SECONDS] -np N PROGRAM [ARGS...]" >&2
    exit 2
fi
np=$2
shift 2
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
# shellcheck disable=SC2086
exec timeout --kill-after=10 "$limit" "${MPIRUN:-mpirun}" --oversubscribe --bind-to none \
    ${PC_MPIRUN_ARGS:-} -np "$np" "$@"
