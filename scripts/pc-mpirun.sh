#!/usr/bin/env bash
# pc-mpirun.sh: start an MPI job the way PipeCompress tests, scripts and demos need it.
#   scripts/pc-mpirun.sh [-t SECONDS] -np N PROGRAM [ARGS...]
# - always under `timeout` (-t SECONDS, default 3600; tests pass their own): a hung job
#   fails instead of hanging CI, and says so when the limit ends it;
# - as root, the two Open MPI variables that allow it;
# - oversubscription allowed, and Open MPI told to yield when idle (more ranks than cores
#   would otherwise busy-poll);
# - --bind-to none: PipeCompress binds its own threads (pc_topo);
# - single node: shared memory between ranks, control channel on loopback;
# - a stop (SIGINT from Ctrl-C, SIGTERM, SIGHUP) goes to the ranks themselves, not to
#   mpirun: they stop together at an iteration boundary (pc-train writes its final
#   checkpoint) and exit 128 + N, and so does this script. Signalled directly, mpirun
#   would abort the job and exit 1 (and print Open MPI's "Epoll MOD" warnings).
# Exit status: the job's (mpirun's); 124 when the time limit ended it.
# MPIRUN (the configure-detected mpirun) and PC_MPIRUN_ARGS (extra mpirun flags) are honoured.
set -euo pipefail
limit=3600
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

# timeout puts itself and mpirun in a process group of their own, so a Ctrl-C at the
# terminal reaches this script only; the trap hands it on to the ranks.
# shellcheck disable=SC2086
timeout --kill-after=10 "$limit" "${MPIRUN:-mpirun}" --oversubscribe --bind-to none \
    ${PC_MPIRUN_ARGS:-} -np "$np" "$@" &
job=$!

# forward SIG: send SIG to the ranks, found as the children of the mpirun that timeout
# started (by pid: nothing else on the machine is touched). Before mpirun has started
# them there is nothing to stop but mpirun itself.
forward() {
    local sig=$1 m ranks=""
    for m in $(ps -o pid= --ppid "$job" 2>/dev/null); do
        ranks="$ranks $(ps -o pid= --ppid "$m" 2>/dev/null | tr '\n' ' ')"
    done
    # shellcheck disable=SC2086
    if [ -n "${ranks// /}" ]; then
        kill "-$sig" $ranks 2>/dev/null || true
    else
        kill "-$sig" "$job" 2>/dev/null || true
    fi
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward TERM' HUP # a hang-up stops cleanly too (pc-train handles INT and TERM)

# wait returns early (status > 128) when a trapped signal arrives: wait again until the
# job itself has ended.
set +e
while :; do
    wait "$job"
    rc=$?
    kill -0 "$job" 2>/dev/null || break
done
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "pc-mpirun.sh: the time limit of $limit s ended the job (-t SECONDS raises it)" >&2
fi
exit "$rc"
